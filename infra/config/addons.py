"""The ``addons`` section: cluster add-ons installed as Helm charts through CDK."""

from __future__ import annotations

from pydantic import Field

from infra.config.base import _Model
from infra.versions import ADDONS_ENABLED_BY_DEFAULT, HELM_CHARTS


class AddonConfig(_Model):
    enabled: bool | None = Field(
        None, description="Install this Helm chart. Default: the add-on's own default (see "
        "each add-on); setting only `version` never turns on an add-on that is off by default."
    )
    version: str | None = Field(
        None, description="Chart version; default: the version pinned in infra/versions.py. "
        "Must be one the kit lists there."
    )


class DcgmExporterConfig(AddonConfig):
    service_monitor: bool = Field(
        False, description="Also create the chart's Prometheus ServiceMonitor. Needs the "
        "Prometheus Operator CRDs (monitoring.coreos.com) on the cluster, which the kit does not "
        "install; without them the chart install fails."
    )


def _addon(name: str, model: type[AddonConfig] = AddonConfig):
    return Field(default_factory=model,
                 description=f"Helm chart {HELM_CHARTS[name]['chart']} "
                 f"(default {'on' if ADDONS_ENABLED_BY_DEFAULT[name] else 'off'}, version "
                 f"{HELM_CHARTS[name]['version']}).")


class AddonsConfig(_Model):
    """Cluster add-ons installed as Helm charts through CDK."""

    efa_device_plugin: AddonConfig = _addon("efa_device_plugin")
    nvidia_device_plugin: AddonConfig = _addon("nvidia_device_plugin")
    kuberay_operator: AddonConfig = _addon("kuberay_operator")
    dcgm_exporter: DcgmExporterConfig = _addon("dcgm_exporter", DcgmExporterConfig)

    def enabled(self, name: str) -> bool:
        """Whether add-on ``name`` is installed: the config's choice, else the kit default."""
        choice = getattr(self, name).enabled
        return ADDONS_ENABLED_BY_DEFAULT[name] if choice is None else choice

    def chart_version(self, name: str) -> str:
        return getattr(self, name).version or HELM_CHARTS[name]["version"]
