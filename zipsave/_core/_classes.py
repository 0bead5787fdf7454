"""The class an archive's ``init.json`` names, found without importing a module nobody vouched
for: importing runs a module's top-level code (``venv.__main__`` is a program)."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from ..exceptions import ArchiveFormatError, DecodeError, UnsafeGlobalError
from ._component import Component
from ._session import LoadSession

__all__ = ["resolve_class"]


def resolve_class(src: LoadSession, record: dict, member: str, cls: Any) -> Any:
    """The class ``init.json`` names, checked before anything is imported: a class of a module
    this process has imported already (looked up in the module's namespace, no attribute hook
    runs), or one the caller trusts (``trusted=``, the allowlist), which may then be imported.
    Either way it must be a :class:`~zipsave.Saveable`. An archive never makes zipsave import a
    module nobody vouched for: importing runs the module's top-level code."""
    if cls is not None:
        return cls
    path = record.get("class")
    if not isinstance(path, str) or ":" not in path:
        raise ArchiveFormatError("has no `class` import path; pass `cls=`.", archive=src.name, member=member)
    module, qualname = path.split(":", 1)
    full = f"{module}.{qualname}"
    refuse = UnsafeGlobalError(
        full,
        archive=src.name,
        member=member,
        hint=f"Its module is not imported and nothing vouches for it: pass `cls=` (the class itself), import "
        f"`{module}` before loading, or pass `trusted=[{full!r}]` if you trust the archive.",
    )
    parts = module.split(".") + qualname.split(".")
    if not all(p.isidentifier() for p in parts) or any(p.startswith("__") for p in qualname.split(".")):
        raise refuse
    if any(p == "__main__" for p in module.split(".")) and module != "__main__":
        raise refuse  # `venv.__main__`: a program, whose import runs it
    found: Any = sys.modules.get(module)
    if found is None:
        if not src.policy.is_trusted(module, qualname):
            raise refuse
        try:
            found = importlib.import_module(module)
        except Exception as err:  # noqa: BLE001 - a trusted module's import failing is reported
            raise DecodeError(
                f"class `{path}` cannot be imported ({type(err).__name__}: {err}).",
                archive=src.name,
                member=member,
                hint="Install or import the package that defines it, or pass `cls=`.",
            ) from err
    for part in qualname.split("."):
        namespace = vars(found) if isinstance(found, (types.ModuleType, type)) else {}
        if part not in namespace:
            raise DecodeError(
                f"class `{path}` is not defined in its module (no `{part}`).",
                archive=src.name,
                member=member,
                hint="Install the version of the package that defines it, or pass `cls=`.",
            )
        found = namespace[part]
    if not (isinstance(found, type) and issubclass(found, Component)):
        raise UnsafeGlobalError(
            full,
            archive=src.name,
            member=member,
            hint="Only zipsave.Saveable subclasses are built from init.json; pass `cls=` to choose the class yourself.",
        )
    return found
