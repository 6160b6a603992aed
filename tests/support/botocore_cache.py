"""One botocore data loader per data path for the whole test process.

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
