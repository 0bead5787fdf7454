"""Constructor arguments read from an archive's ``init.json``, checked against what the class
takes before RLlib sees them: the signature, and the values an RLModule is built from."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Mapping
from typing import Any, Callable

from ..exceptions import ArchiveFormatError
from ._allowlist import paired_catalog

__all__ = ["check_ctor_args"]

_HINT = "RLlib wrote no such arguments; the archive was edited or made to break readers."


def _catalog_base() -> type:
    from ray.rllib.core.models.catalog import Catalog

    return Catalog


def _space_base() -> type:
    import gymnasium

    return gymnasium.spaces.Space


def _expected_catalog(klass: type) -> type | None:
    """The catalog RLlib pairs with one of its own algorithms' modules (PPO's module takes a
    ``PPOCatalog`` or a subclass), or ``None`` where there is no pairing to check."""
    parts = getattr(klass, "__module__", "").split(".")
    if parts[:3] != ["ray", "rllib", "algorithms"] or len(parts) < 4:
        return None
    path = paired_catalog(parts[3])
    if path is None:
        return None
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name, None)


def _catalog(value: Any, klass: type) -> str | None:
    if value is None:
        return None
    base = _catalog_base()
    if not isinstance(value, type) or not issubclass(value, base):
        return f"is {_name(value)}, not a subclass of {base.__qualname__}"
    expected = _expected_catalog(klass)
    if expected is not None and not issubclass(value, expected):
        return f"is {_name(value)}, which {klass.__qualname__} cannot use (it takes a {expected.__qualname__})"
    return None


def _space(value: Any, klass: type) -> str | None:
    if value is None or isinstance(value, _space_base()):
        return None
    return f"is {_name(value)}, not a gymnasium space"


def _flag(value: Any, klass: type) -> str | None:
    return None if value is None or isinstance(value, bool) else f"is {_name(value)}, not True, False or None"


def _sizes(key: str, value: Any) -> str | None:
    """Layer sizes: ``*_hiddens`` lists of positive ints, ``*_dim``/``*_size`` positive ints."""
    if key.endswith("hiddens"):
        if not isinstance(value, (list, tuple)) or not all(type(n) is int and n > 0 for n in value):
            return f"`{key}` is {_short(value)}, not a list of positive layer sizes"
    elif key.endswith(("_dim", "_size", "_cell_size")) and value is not None:
        if type(value) is not int or value <= 0:
            return f"`{key}` is {_short(value)}, not a positive size"
    return None


def _model_config(value: Any, klass: type) -> str | None:
    if value is None:
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items: Mapping[str, Any] = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    elif isinstance(value, Mapping):
        items = value
    else:
        return f"is {_name(value)}, not a dict of model settings"
    for key, item in items.items():
        problem = _sizes(str(key), item)
        if problem is not None:
            return problem
    return None


#: The keyword arguments an ``RLModule`` is built from, each with its check.
_CHECKS: dict[str, Callable[[Any, type], str | None]] = {
    "catalog_class": _catalog,
    "observation_space": _space,
    "action_space": _space,
    "inference_only": _flag,
    "learner_only": _flag,
    "model_config": _model_config,
    "model_config_dict": _model_config,
}


def _name(value: Any) -> str:
    if isinstance(value, type):
        return f"the class `{value.__module__}.{value.__qualname__}`"
    return f"a {type(value).__name__}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def check_ctor_args(
    klass: type, args: tuple | list, kwargs: dict, *, archive: Any, member: str, skip: frozenset[str] = frozenset()
) -> None:
    """Refuse constructor arguments ``klass`` does not take (extra positional arguments,
    unknown keywords) and, for the keywords an RLModule is built from, values of the wrong
    kind: a ``catalog_class`` that is no catalog (or not the one RLlib pairs with the module),
    spaces that are not gymnasium spaces, layer sizes that are not positive ints.

    ``skip`` names the arguments the caller passed (overrides): theirs, not the archive's.

    Raises
    ------
    ArchiveFormatError
        Naming the archive, ``member`` (the ``init.json``) and the argument.
    """
    try:
        bound = inspect.signature(klass).bind(*args, **kwargs)
    except TypeError as err:
        raise ArchiveFormatError(
            f"holds constructor arguments that {klass.__qualname__} does not take ({err}).",
            archive=archive,
            member=member,
            key="args",
            hint=_HINT,
        ) from err
    except ValueError:  # no signature to check against (a builtin): the build boundary decides
        return
    values: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        param = bound.signature.parameters[name]
        if param.kind is inspect.Parameter.VAR_KEYWORD and isinstance(value, dict):
            values.update(value)
        else:
            values[name] = value
    for name, check in _CHECKS.items():
        if name in values and name not in skip:
            problem = check(values[name], klass)
            if problem is not None:
                raise ArchiveFormatError(
                    f"constructor argument `{name}` {problem}; {klass.__qualname__} was not built.",
                    archive=archive,
                    member=member,
                    key=f"args.{name}",
                    hint=_HINT,
                )
