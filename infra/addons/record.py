"""What one Helm add-on declares: the record type every module in ``infra.addons`` fills in.

A record carries everything the rest of the kit needs to know about one chart: where it comes
from and which versions were checked (with where each was read), whether it is on by default,
its own config section, its Helm values as a function of the kit's context, where its pods must
land and what its install waits for. Config, the cluster construct, the scheduling contract and
the chart contract tests read these records; none of them names an add-on.

This module is part of the ground layer: it imports pydantic, ``infra.names`` and
``infra.strict`` only (never ``infra.config``, which builds its ``addons`` section from these
records).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, Field

from infra import names
from infra.strict import CONFIG_SETTINGS

# Node selectors the charts' values use; the node groups set these labels (infra.names).
EFA_NODES = {names.EFA_LABEL: "true"}
GPU_NODES = {names.NODE_ROLE_LABEL: names.NODE_ROLE_GPU}
SYSTEM_NODES = {names.NODE_ROLE_LABEL: names.NODE_ROLE_SYSTEM}


# The config section every add-on has (``addons.<key>``); a record may extend it. No docstring:
# pydantic would publish it in config.schema.json.
class AddonConfig(BaseModel):
    model_config = CONFIG_SETTINGS  # as every config section (strict: no true for 1, no "2" for 2)

    enabled: bool | None = Field(
        None, description="Install this Helm chart. Default: the add-on's own default (see "
        "each add-on); setting only `version` never turns on an add-on that is off by default."
    )
    version: str | None = Field(
        None, description="Chart version; default: the version pinned in the add-on's record "
        "(infra/addons/). Must be one the record lists as tested."
    )


class Placement(enum.Enum):
    """Where a workload's pods must land, and nowhere else."""

    GPU = "every GPU node group"
    SYSTEM = "the system node group"
    BOTH = "every GPU node group and the system node group"

    @property
    def on_gpu(self) -> bool:
        return self in (Placement.GPU, Placement.BOTH)

    @property
    def on_system(self) -> bool:
        return self in (Placement.SYSTEM, Placement.BOTH)


class Wait(enum.Enum):
    """What a chart's install waits for (Helm ``--wait`` plus a CloudFormation dependency)."""

    # A Deployment on the system nodes: without them its pods never become ready.
    SYSTEM_NODES = "the system node group"


@dataclass(frozen=True)
class Workload:
    """A workload the chart renders, by ``metadata.name``, and where its pods must land.

    Workloads a chart renders that its record does not list must land nowhere (e.g. the NVIDIA
    plugin's MPS daemon, which only MPS-labelled nodes run)."""

    name: str
    lands: Placement
    # The extended resource this DaemonSet makes allocatable where it runs (device plugins).
    advertises: str | None = None
    # Rendered only for some configs (e.g. GPU feature discovery where UltraServers are
    # configured): the contract checks its placement when rendered and does not require it.
    conditional: bool = False


@dataclass(frozen=True)
class ChartVersion:
    """A chart version and where it was read (repository path, commit or tag, date).

    ``min_kubernetes_version`` ("MAJOR.MINOR", empty: no floor beyond the kit's own versions) is
    the oldest Kubernetes this version runs on, as its project documents it, and
    ``min_kubernetes_source`` says where (file and commit); config validation refuses a
    ``kubernetes_version`` below it while the add-on is enabled at this version. Same field name
    as the instance catalog's floor (``infra.catalog.instances.InstanceType``)."""

    version: str
    read: str
    min_kubernetes_version: str = ""
    min_kubernetes_source: str = ""

    def __post_init__(self) -> None:
        if self.min_kubernetes_version and not self.min_kubernetes_source:
            raise ValueError(f"chart version {self.version}: a Kubernetes floor needs its source")


@dataclass(frozen=True)
class AddonContext:
    """What an add-on's values may depend on."""

    gpu_tolerations: list[dict[str, str]]  # tolerate every GPU group's taints
    gpu_instance_types: tuple[str, ...]  # the GPU groups' instance types, sorted, no repeats
    settings: AddonConfig  # this add-on's own config section


@dataclass(frozen=True)
class HelmAddon:
    """One Helm add-on. ``key`` is its config key (``addons.<key>``) and construct ID."""

    key: str
    chart: str
    repository: str
    namespace: str
    release: str
    pinned: ChartVersion
    # Every version config accepts, the pinned one included: the chart contract test
    # (tests/ops/test_chart_contract.py, charts from ../shared/charts) renders each with every
    # distinct set of values the examples give this add-on at that version, checks where its pods
    # land, and drops each key the values set one at a time: each must change the render (or be
    # listed there with a reason). Add one only after that test passes for it.
    tested: tuple[ChartVersion, ...]
    enabled_by_default: bool
    workloads: tuple[Workload, ...]
    values: Callable[[AddonContext], dict[str, Any]]
    waits_for: tuple[Wait, ...] = ()
    settings: type[AddonConfig] = AddonConfig
    # Default on when this is true of the configured GPU instance types (e.g. only where
    # UltraServers are configured); the config's `enabled` still decides when set.
    enabled_when: Callable[[tuple[str, ...]], bool] | None = None

    def default_enabled(self, gpu_instance_types: tuple[str, ...] = ()) -> bool:
        """On by default for these GPU instance types?"""
        if self.enabled_when is not None and self.enabled_when(gpu_instance_types):
            return True
        return self.enabled_by_default

    @property
    def version(self) -> str:
        return self.pinned.version

    @property
    def versions(self) -> list[str]:
        return [v.version for v in self.tested]

    def tested_version(self, version: str) -> ChartVersion:
        """The tested entry for ``version`` (KeyError if config would refuse it)."""
        for entry in self.tested:
            if entry.version == version:
                return entry
        raise KeyError(version)

    def __post_init__(self) -> None:
        if self.pinned not in self.tested:
            raise ValueError(f"add-on {self.key}: the pinned version {self.pinned.version} must "
                             "be one of its tested versions")
