"""AWS regions, read offline from the endpoint data bundled with botocore (no AWS call).

Config validation asks whether a region exists and offers EKS, so that `region: us-fake-9`
fails before synth instead of at `cdk deploy`. botocore ships the partitions' endpoint data
(``botocore/data/endpoints.json``); a region newer than the installed botocore is reported with
the fix to upgrade it.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def regions(service: str) -> frozenset[str]:
    """Every region, in every partition, where botocore's endpoint data lists ``service``."""
    import botocore.session  # the data load takes ~0.3 s: only when a config is validated

    session = botocore.session.get_session()
    found: set[str] = set()
    for partition in session.get_available_partitions():
        found.update(session.get_available_regions(service, partition))
    return frozenset(found)


def botocore_version() -> str:
    import botocore

    return botocore.__version__
