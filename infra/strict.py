"""The pydantic settings of every config section, the ``addons`` ones included: frozen, refusing
unknown keys, and strict types (YAML's ``true`` is not the number 1, and a quoted ``"2"`` or
``"off"`` is text; pydantic's default would convert all three silently).

Ground layer: it imports pydantic only. It sits below both ``infra.config`` (``base``) and
``infra.addons`` (whose sections ``infra.config`` builds on, so they cannot import it).
"""

from __future__ import annotations

from pydantic import ConfigDict

CONFIG_SETTINGS = ConfigDict(frozen=True, extra="forbid", strict=True)
