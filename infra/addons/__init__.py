"""Cluster add-ons installed as Helm charts: one module per add-on, listed here (append).

Each module declares one ``HelmAddon`` record (``infra.addons.record``). ``ADDONS`` is the
registry that config (``infra.addons.config``), the cluster construct
(``infra.constructs.cluster_addons``), the scheduling contract (``ops.contract``) and the chart
contract tests iterate. To add an add-on: write its module, add one line below, and put its
packaged chart in ../shared/charts for the contract tests.

The order is the order of the ``addons`` config fields (and so of config.schema.json and
docs/config-reference.md) and of the Helm chart resources in the cluster template: append. It is
not an install order: CloudFormation creates the charts in parallel (no chart depends on another;
see ``infra.constructs.cluster_addons``).
"""

from __future__ import annotations

from infra.addons import (
    dcgm_exporter,
    dra_driver,
    efa_device_plugin,
    kuberay_operator,
    nvidia_device_plugin,
)
from infra.addons.record import (
    AddonConfig,
    AddonContext,
    ChartVersion,
    HelmAddon,
    Placement,
    Wait,
    Workload,
)

ADDONS: tuple[HelmAddon, ...] = (
    efa_device_plugin.ADDON,
    nvidia_device_plugin.ADDON,
    kuberay_operator.ADDON,
    dcgm_exporter.ADDON,
    dra_driver.ADDON,
)


def addon(key: str) -> HelmAddon:
    """The registered add-on whose config key is ``key`` (KeyError if none)."""
    for record in ADDONS:
        if record.key == key:
            return record
    raise KeyError(key)


__all__ = ["ADDONS", "AddonConfig", "AddonContext", "ChartVersion", "HelmAddon", "Placement",
           "Wait", "Workload", "addon"]
