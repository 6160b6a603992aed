"""The one base of the render context's models (``RenderContext`` and its parts, ``StackOutputs``,
``FabricJob``): frozen, so a context built and checked once cannot change before the templates
read it, and closed, so a misspelt field is an error rather than a silently ignored value."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FrozenModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
