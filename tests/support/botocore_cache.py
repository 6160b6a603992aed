"""One botocore data loader per data path for the whole test process; moto's S3 URL table built
once per setting.

moto's ``mock_aws`` resets ``boto3.DEFAULT_SESSION``, so every test starts a new botocore session
whose new loader parses the service models and ``endpoints.json`` again: most of the CPU of the
moto tests went to that JSON. botocore's loader caches per instance what it read from its
read-only data files, and one session already shares one loader between all its clients; sharing
it between sessions changes no client's behaviour, only how often the same files are parsed.
"""

from __future__ import annotations

import functools

import botocore.loaders
import botocore.session


def share_botocore_loader() -> None:
    """Make every botocore session of this process use one loader per ``data_path`` setting."""
    if getattr(botocore.session.create_loader, "shared_by_tests", False):
        return
    shared = functools.cache(botocore.loaders.create_loader)  # keyed by the search path string
    shared.shared_by_tests = True
    botocore.session.create_loader = shared


def share_moto_s3_urls() -> None:
    """moto's S3 backend reloads its ``moto.s3.urls`` module twice for every request (to pick up
    ``MOTO_S3_CUSTOM_ENDPOINTS``, the one setting that module reads): keep one module per value
    of that variable instead. The URL table, and so the handler of every request, is the same."""
    import importlib
    import os

    from moto.s3.models import S3Backend

    if getattr(S3Backend._url_module, "shared_by_tests", False):
        return
    modules: dict[str | None, object] = {}

    def _url_module(self):  # noqa: ANN001 - moto's property
        key = os.environ.get("MOTO_S3_CUSTOM_ENDPOINTS")
        if key not in modules:
            import moto.s3.urls

            modules[key] = importlib.reload(moto.s3.urls)
        return modules[key]

    prop = property(_url_module)
    prop.fget.shared_by_tests = True
    S3Backend._url_module = prop
