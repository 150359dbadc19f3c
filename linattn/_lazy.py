"""Names a package gives on first use (PEP 562 module ``__getattr__``), so that importing it imports no torch."""

from __future__ import annotations

import importlib
from typing import Any


def attribute(package: str, table: dict, namespace: dict, name: str) -> Any:
    """``name`` of ``package``, looked up in ``table`` (name → submodule) and imported now; kept in the package's
    ``namespace`` so the next lookup is a plain attribute. AttributeError for a name the table does not hold."""
    if name not in table:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{package}.{table[name]}"), name)
    namespace[name] = value
    return value
