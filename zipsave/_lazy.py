"""Attributes of a package imported on first use (PEP 562), so that importing the package costs
little and a load imports only what it uses: ``zipsave`` and ``zipsave._api`` use it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_attributes"]

#: Helper names of the packages that use this, kept out of their ``dir()``.
_HIDDEN = frozenset({"TYPE_CHECKING", "lazy_attributes", "_LAZY", "_SUBMODULES"})


def lazy_attributes(
    package: str, names: Mapping[str, str], submodules: frozenset[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: each of ``names`` (``{name: module
    relative to the package}``) is imported on first use and bound in the package, and each of
    ``submodules`` is found as an attribute as if the package had imported it. A module written
    ``"module:attribute"`` binds that attribute under the name (``from module import a as b``)."""
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")  # binds itself as an attribute
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = module.partition(":")
        value = getattr(importlib.import_module(module, package), attribute or name)
        namespace[name] = value  # later lookups do not come here
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names, *submodules} - _HIDDEN)

    return __getattr__, __dir__
