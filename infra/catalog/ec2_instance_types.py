"""Every EC2 instance type name, read offline from the EC2 service model bundled with botocore
(no AWS call, no credentials).

Config validation asks whether ``system_nodes.instance_type`` exists, so that ``m5.nope`` fails
before synth instead of when the node group's launch fails at `cdk deploy`. The EC2 API's
``InstanceType`` enumeration (``botocore/data/ec2/<version>/service-2.json``) lists every type
EC2 offers; a type newer than the installed botocore is reported with the fix to upgrade it.
"""

from __future__ import annotations

import re
from functools import lru_cache

_SIZES = ("nano", "micro", "small", "medium", "large", "xlarge")


@lru_cache(maxsize=None)
def ec2_instance_types() -> frozenset[str]:
    """Every instance type name in botocore's EC2 service model.

    Read through botocore's data loader, not a session (a session would read the AWS profile);
    parsing the model takes about 0.25 s, once per process, and only when asked."""
    from botocore.loaders import create_loader

    model = create_loader().load_service_model("ec2", "service-2")
    return frozenset(model["shapes"]["InstanceType"]["enum"])


def _size_order(size: str) -> tuple[int, int, str]:
    if size in _SIZES:
        return 0, _SIZES.index(size), ""
    m = re.fullmatch(r"(\d+)xlarge", size)
    return (1, int(m.group(1)), "") if m else (2, 0, size)


def family_sizes(family: str) -> list[str]:
    """The instance types of ``family`` (``m5`` -> m5.large, m5.xlarge, ...), smallest first."""
    types = [t for t in ec2_instance_types() if t.split(".", 1)[0] == family]
    return sorted(types, key=lambda t: _size_order(t.split(".", 1)[1]))
