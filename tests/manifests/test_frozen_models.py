"""Every pydantic model of the render context shares one frozen, closed base (manifests.frozen)."""

from __future__ import annotations

import inspect

import pytest
from pydantic import BaseModel, ValidationError

import manifests.context
import manifests.fabric
import manifests.outputs
from manifests.frozen import FrozenModel


def test_every_render_model_is_frozen_and_closed():
    models = [obj for mod in (manifests.context, manifests.fabric, manifests.outputs)
              for obj in vars(mod).values()
              if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj.__module__ == mod.__name__]
    assert models, "no render model found"
    assert [m.__name__ for m in models if not issubclass(m, FrozenModel)] == []


def test_frozen_model_refuses_changes_and_unknown_fields():
    class Point(FrozenModel):
        x: int

    p = Point(x=1)
    with pytest.raises(ValidationError):
        p.x = 2
    with pytest.raises(ValidationError):
        Point(x=1, y=2)
