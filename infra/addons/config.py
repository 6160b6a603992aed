"""The ``addons`` config section, built from the registry: one field per add-on, in order.

Each field's type is the add-on's own settings model (``AddonConfig`` or a record's subclass of
it), its description names the chart, its default and its pinned version. ``infra.config`` uses
``AddonsConfig`` as the type of ``KitConfig.addons``; nothing here imports ``infra.config``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, create_model

from infra import addons as registry
from infra.addons.record import AddonConfig, HelmAddon
from infra.strict import CONFIG_SETTINGS


class AddonsBase(BaseModel):
    """Behaviour of the ``addons`` section; its fields come from the registry."""

    model_config = CONFIG_SETTINGS  # as every config section (strict: no true for 1, no "2" for 2)

    def enabled(self, name: str, gpu_instance_types: tuple[str, ...] = ()) -> bool:
        """Whether add-on ``name`` is installed: the config's choice, else the kit default for
        these GPU instance types (``KitConfig.addon_enabled`` passes the configured ones)."""
        choice = getattr(self, name).enabled
        return registry.addon(name).default_enabled(gpu_instance_types) if choice is None \
            else choice

    def chart_version(self, name: str) -> str:
        return getattr(self, name).version or registry.addon(name).version


def _default_text(record: HelmAddon) -> str:
    if record.enabled_when is not None:  # its docstring reads "Whether <condition>."
        return "on where " + (record.enabled_when.__doc__ or "").strip().rstrip(".") \
            .removeprefix("Whether ")
    return "on" if record.enabled_by_default else "off"


def _field(record: HelmAddon):
    return Field(default_factory=record.settings,
                 description=f"Helm chart {record.chart} "
                 f"(default {_default_text(record)}, version "
                 f"{record.version}).")


def addons_model(records: tuple[HelmAddon, ...] | None = None) -> type[AddonsBase]:
    """A pydantic model with one field per add-on in ``records`` (default: the registry)."""
    records = registry.ADDONS if records is None else records
    return create_model(
        "AddonsConfig", __base__=AddonsBase, __module__=__name__,
        __doc__="Cluster add-ons installed as Helm charts through CDK.",
        **{r.key: (r.settings, _field(r)) for r in records})


AddonsConfig = addons_model()

__all__ = ["AddonConfig", "AddonsBase", "AddonsConfig", "addons_model"]
