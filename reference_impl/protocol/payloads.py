"""Version-agnostic construction of kio payload dataclasses.

kio generates one class per (API, version). Handlers are written once for all
versions: they name fields and nested classes, and `build` keeps the fields that
exist in the negotiated version and lets kio's defaults fill the rest.
"""

from __future__ import annotations

import dataclasses
import sys
from functools import lru_cache
from types import ModuleType
from typing import Any


@lru_cache(maxsize=None)
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def has_field(cls_or_obj: Any, name: str) -> bool:
    cls = cls_or_obj if isinstance(cls_or_obj, type) else type(cls_or_obj)
    return name in _field_names(cls)


def build(cls: type, /, **fields: Any) -> Any:
    """Instantiate `cls` with the subset of `fields` it declares."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in fields.items() if k in names})


def nested(anchor: type | Any, class_name: str) -> type:
    """A sibling class from the module that defines `anchor` (same API and version)."""
    cls = anchor if isinstance(anchor, type) else type(anchor)
    module: ModuleType = sys.modules[cls.__module__]
    try:
        return getattr(module, class_name)  # probe: a kio schema module (foreign), class by name
    except AttributeError:
        raise LookupError(f"{module.__name__} has no class {class_name}") from None


def get(obj: Any, name: str, default: Any = None) -> Any:
    """Field of a payload that may not exist in older versions."""
    return getattr(obj, name, default) if has_field(obj, name) else default  # probe: kio fields differ by version
