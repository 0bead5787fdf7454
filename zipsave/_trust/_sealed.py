"""Trust objects that loaded data cannot change: a metaclass that refuses class-attribute writes
once the class is built, and a module type that refuses rebinding a module's names."""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["Sealed", "seal", "seal_module"]


class Sealed(type):
    """Metaclass of zipsave's trust classes (:class:`~zipsave._trust.TrustPolicy`): after
    :func:`seal`, ``TrustPolicy.is_trusted = ...`` raises, so even a write that reached the class
    could not widen trust. Instances are frozen dataclasses."""

    def __setattr__(cls, name: str, value: Any) -> None:
        if cls.__dict__.get("_sealed_", False):
            raise AttributeError(f"{cls.__qualname__} is part of zipsave's trust policy and cannot be changed.")
        super().__setattr__(name, value)

    def __delattr__(cls, name: str) -> None:
        if cls.__dict__.get("_sealed_", False):
            raise AttributeError(f"{cls.__qualname__} is part of zipsave's trust policy and cannot be changed.")
        super().__delattr__(name)


def seal(cls: type) -> type:
    """Seal ``cls`` (a class whose metaclass is :class:`Sealed`); use as the outermost decorator."""
    type.__setattr__(cls, "_sealed_", True)
    return cls


class _SealedModule(types.ModuleType):
    """A module whose names cannot be rebound from outside (its own ``global`` statements still
    write its namespace directly)."""

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"module `{self.__name__}` is part of zipsave's trust policy; `{name}` cannot be rebound.")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"module `{self.__name__}` is part of zipsave's trust policy; `{name}` cannot be deleted.")


def seal_module(name: str) -> None:
    """Make ``sys.modules[name]`` refuse attribute writes; call at the end of the module."""
    sys.modules[name].__class__ = _SealedModule
