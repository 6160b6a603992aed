"""The base of every config section: frozen, refusing unknown keys and values of the wrong type.

Strict types: YAML's ``true`` is not the number 1, and a quoted ``"2"`` or ``"off"`` is text, not a
number or a boolean (pydantic's default would convert all three silently). A whole number still
fills a ``float`` field (``lr: 1``). ``Number`` is the one exception, for fields that hold a
fraction: PyYAML reads ``1e-6`` (no decimal point) as text, so text that spells a number is taken
there, and only true/false is refused.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field
from pydantic_core import PydanticCustomError

# The settings every config section shares, infra/addons' too (that package cannot import
# infra.config, so they live in the ground layer).
from infra.strict import CONFIG_SETTINGS


def _not_a_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        raise PydanticCustomError("float_type", "Input should be a valid number")
    return value


Number = Annotated[float, Field(strict=False), BeforeValidator(_not_a_boolean)]


class _Model(BaseModel):
    model_config = CONFIG_SETTINGS
