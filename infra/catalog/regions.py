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
    """Every region, in every partition, where botocore's endpoint data lists ``service``.

    Read from the data file through botocore's loader, not a session: a session would read the
    AWS profile and config, which synth must never need."""
    from botocore.loaders import create_loader  # loading takes ~0.3 s: only when validating

    found: set[str] = set()
    for partition in create_loader().load_data("endpoints")["partitions"]:
        endpoints = partition["services"].get(service, {}).get("endpoints", {})
        found.update(r for r in endpoints if r in partition["regions"])
    return frozenset(found)


def botocore_version() -> str:
    import botocore

    return botocore.__version__
