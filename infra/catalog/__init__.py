"""The kit's catalogs: facts the kit reads and never computes, each with its source.

- ``instances``: the EFA GPU instance types (network layout, GPUs, capabilities, quota, price).
- ``gpus``: one record per GPU model (peaks, achievable fractions, CUDA arch).
- ``models``: the MoE model catalog and the checkpoint sizes derived from it.
- ``fsx``: FSx for Lustre sizes, throughput tiers and prices.
- ``acceptance``: published fabric figures the gate compares with.

A fork adds an instance type with one ``InstanceType`` entry in ``instances.py`` (and, for a new
GPU model, one ``GpuSpec`` in ``gpus.py``). Part of the ground layer: no CDK, and nothing from
config, the planner, manifests or ops.
"""

from infra.catalog.gpus import GPUS, Efficiency, GpuSpec
from infra.catalog.instances import (
    INSTANCE_TYPES,
    P_ON_DEMAND_QUOTA_CODE,
    P_ON_DEMAND_QUOTA_NAME,
    PRICE_DATE,
    UNSUPPORTED_INSTANCE_TYPES,
    InstanceType,
    InterfaceType,
    NetworkInterfaceSpec,
    get_instance_type,
    gin_gpu_types,
    supports_gin_gpu,
)
from infra.catalog.models import MODEL_CATALOG, MoEModel

__all__ = [
    "GPUS", "INSTANCE_TYPES", "MODEL_CATALOG", "PRICE_DATE", "P_ON_DEMAND_QUOTA_CODE",
    "P_ON_DEMAND_QUOTA_NAME", "UNSUPPORTED_INSTANCE_TYPES", "Efficiency", "GpuSpec",
    "InstanceType", "InterfaceType", "MoEModel", "NetworkInterfaceSpec", "get_instance_type",
    "gin_gpu_types",
    "supports_gin_gpu",
]
