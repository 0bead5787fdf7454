"""What a name read from an archive may address: the state the object being built already holds,
walked through its own instance dictionaries, never through ``getattr``.

A name in an archive (a ``pytorch_variables.pth`` key, a ``data`` key, a state-dict member, a
component folder, a ``modes`` path) is attacker-chosen. ``getattr`` follows dunders, class
attributes, bound methods and module attributes, so ``__class__.__init__.__globals__.sys`` would
reach every module of the process. The walk here is an allowlist instead: each step goes into a
``torch.nn.Module``'s parameters, buffers and children, an instance's own ``__dict__`` (or a
slot), a list/tuple index or a dict key -- and nowhere else.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from ..exceptions import ParameterMismatchError, UnsafeNameError
from ._parts import MODULE_INTERNALS, index_of

__all__ = ["MISSING", "assign", "check_data_key", "check_name", "check_path", "resolve", "set_variable"]

#: Prefixes of zipsave's own bookkeeping attributes (also never saved, see ALWAYS_EXCLUDED_PREFIXES).
_PRIVATE_PREFIXES = ("_zipsave", "zipsave_")

#: Objects whose attributes are never state of the object being loaded: classes, modules,
#: functions and methods (their ``__dict__`` is code's, or a module's globals), frames and code.
_NEVER_WALKED = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
    types.CodeType,
    types.FrameType,
    types.TracebackType,
    types.MappingProxyType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.MethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    staticmethod,
    classmethod,
    property,
)

#: Packages whose objects are zipsave's machinery (trust policy, registry, codec, archive reader):
#: a name from an archive never addresses them, whatever holds a reference to them.
_OWN_PACKAGES = (
    "zipsave._trust",
    "zipsave._registry",
    "zipsave._core",
    "zipsave._codec",
    "zipsave._archive",
    "zipsave._tensors",
    "zipsave._format",
    "zipsave.exceptions",
)

MISSING: Any = object()


def check_name(part: str, *, path: str, **where: Any) -> None:
    """Raise :class:`UnsafeNameError` unless ``part`` (one step of ``path``) may be an attribute,
    key or index of the object's own state: a non-empty name that is no dunder (``__class__``),
    no double-underscore private, and not one of zipsave's own (``_zipsave*``, ``zipsave_*``)."""
    if not isinstance(part, str) or not part:
        raise UnsafeNameError(path, f"has an empty step {part!r}", **where)
    if part.startswith("__"):
        raise UnsafeNameError(path, f"steps through `{part}`, a dunder or name-mangled private attribute", **where)
    if part.startswith(_PRIVATE_PREFIXES):
        raise UnsafeNameError(path, f"steps through `{part}`, one of zipsave's own attributes", **where)


def check_data_key(obj: Any, name: str, **where: Any) -> None:
    """A top-level ``data`` key of ``obj`` becomes an instance attribute: a safe name (see
    :func:`check_name`) that does not replace code of its class (a method, a class, a module)
    nor reach one of zipsave's own objects."""
    check_name(name, path=name, **where)
    _check_holder(obj, name, name, where)
    _check_class_attribute(obj, name, name, where)


def check_path(cls: type, path: str, **where: Any) -> None:
    """Check a dotted ``path`` that code outside zipsave will follow with ``getattr`` on an
    instance of ``cls`` (SB3's own ``load`` and ``set_parameters``): every step a safe name
    (:func:`check_name`), the first not code of ``cls`` (a method, property, class)."""
    first = path.split(".")[0]
    for part in path.split("."):
        check_name(part, path=path, **where)
    try:
        static = _class_lookup(cls, first)
    except AttributeError:
        return
    if not isinstance(static, types.MemberDescriptorType) and (
        callable(static) or hasattr(type(static), "__get__") or isinstance(static, types.ModuleType)
    ):
        raise UnsafeNameError(
            path,
            f"addresses `{first}`, which {cls.__name__} defines as a {type(static).__name__} (code, not state)",
            **where,
        )


def resolve(obj: Any, path: str, **where: Any) -> Any:
    """The object at the dotted ``path`` inside ``obj``'s own state.

    Raises
    ------
    UnsafeNameError
        A step is a dunder, zipsave's own, or would leave the object's state (a class, module,
        function or method, or a class attribute).
    AttributeError
        The object simply has no such state (a name from another version of the class).
    """
    found = obj
    for part in path.split("."):
        check_name(part, path=path, **where)
        found = _step(found, part, path, where)
    return found


def assign(obj: Any, path: str, value: Any, **where: Any) -> None:
    """Set the state at the dotted ``path`` of ``obj`` to ``value``: every step but the last is
    walked by :func:`resolve`; the last is a parameter, buffer or child of a module, a key of a
    dict, an index of a list, or an instance attribute that is not code of its class."""
    head, _, last = path.rpartition(".")
    holder = resolve(obj, head, **where) if head else obj
    check_name(last, path=path, **where)
    _check_holder(holder, last, path, where)
    index = index_of(last)
    if isinstance(holder, dict):
        holder[index if index is not None and last not in holder and index in holder else last] = value
        return
    if isinstance(holder, list):
        if index is None or index >= len(holder):
            raise AttributeError(f"`{path}`: the list has no index {last}")
        holder[index] = value
        return
    if isinstance(holder, tuple):
        raise UnsafeNameError(path, "addresses an item of a tuple, which cannot change", **where)
    _check_class_attribute(holder, last, path, where)
    setattr(holder, last, value)


def _check_holder(holder: Any, part: str, path: str, where: dict) -> None:
    if isinstance(holder, _NEVER_WALKED):
        raise UnsafeNameError(
            path, f"addresses `{part}` of a {type(holder).__name__}, which is code, not state of the object", **where
        )
    module = type(holder).__module__ or ""
    if any(module == p or module.startswith(p + ".") for p in _OWN_PACKAGES):
        raise UnsafeNameError(path, f"addresses `{part}` of zipsave's own {type(holder).__name__}", **where)
    if isinstance(holder, torch.nn.Module) and part in MODULE_INTERNALS:
        # torch's registries and hooks: a callable written there would be called by forward()
        raise UnsafeNameError(path, f"addresses `{part}`, torch's bookkeeping of the module, not its state", **where)


def _check_class_attribute(holder: Any, part: str, path: str, where: dict) -> None:
    """An instance attribute may shadow a plain class-level default (``learning_rate = 3e-4``)
    or fill a slot, never a method, property, class or module: those are code."""
    if isinstance(holder, torch.nn.Module) and part in _module_state(holder):
        return
    try:
        static = _class_lookup(type(holder), part)
    except AttributeError:
        return
    if isinstance(static, types.MemberDescriptorType):
        return  # a __slots__ entry: instance state
    if (
        callable(static)
        or isinstance(static, (types.ModuleType, property, staticmethod, classmethod))
        or (hasattr(type(static), "__get__") or hasattr(type(static), "__set__"))
    ):
        raise UnsafeNameError(
            path,
            f"addresses `{part}`, which {type(holder).__name__} defines as a {type(static).__name__} (code, not state)",
            **where,
        )


def _class_lookup(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    raise AttributeError(name)


def _module_state(module: torch.nn.Module) -> dict:
    d = vars(module)
    out: dict = {}
    for registry in ("_parameters", "_buffers", "_modules"):
        out.update(d.get(registry) or {})
    return out


def _described(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.layout} tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def _step(found: Any, part: str, path: str, where: dict) -> Any:
    index = index_of(part)
    if isinstance(found, (list, tuple)):
        if index is not None and index < len(found):
            return found[index]
        raise AttributeError(f"`{path}`: no index {part}")
    if isinstance(found, dict):
        if part in found:
            return found[part]
        if index is not None and index in found:
            return found[index]
        raise AttributeError(f"`{path}`: no key {part}")
    _check_holder(found, part, path, where)
    if isinstance(found, torch.nn.Module):
        state = _module_state(found)
        if part in state:
            return state[part]
    own = getattr(found, "__dict__", None)
    if isinstance(own, dict) and part in own:
        return own[part]
    try:
        static = _class_lookup(type(found), part)
    except AttributeError:
        raise AttributeError(f"`{path}`: {type(found).__name__} has no `{part}`") from None
    if isinstance(static, types.MemberDescriptorType):
        return static.__get__(found, type(found))  # a __slots__ entry
    raise UnsafeNameError(
        path,
        f"addresses `{part}`, which is defined by the class {type(found).__name__}, not state of the object",
        **where,
    )


def set_variable(obj: Any, name: str, value: Any, **where: Any) -> None:
    """Put the loose variable ``name`` (a dotted path read from the archive) into ``obj``: copied
    into the live tensor of the same shape, else set. The path only addresses ``obj``'s own state
    (see :mod:`._address`); anything else raises :class:`~zipsave.exceptions.UnsafeNameError`
    with ``where`` (``archive``, ``member``, ``key``) before a byte is written."""
    if value is None:
        return
    try:
        current = resolve(obj, name, **where)
    except AttributeError:
        current = None
    if isinstance(current, torch.Tensor) and isinstance(value, torch.Tensor) and current.shape == value.shape:
        with torch.no_grad():
            current.data.copy_(value.data)
        return
    if isinstance(current, torch.Tensor) and (current.requires_grad or isinstance(current, torch.nn.Parameter)):
        # An optimizer steps this very tensor (SAC's `log_ent_coef`): put in its place, another
        # value would leave the optimizer on the old one and the first step on a tensor of
        # another shape, or on no tensor (a RuntimeError or AttributeError at the first learn).
        raise ParameterMismatchError(
            f"the variable `{name}` is {_described(value)}, where {type(obj).__name__} holds a tensor of shape "
            f"{tuple(current.shape)} that its optimizer steps; the archive's must fit it to be copied into it.",
            **where,
        )
    try:
        assign(obj, name, value, **where)
    except AttributeError as err:
        raise ParameterMismatchError(
            f"the variable `{name}` has no place in {type(obj).__name__} ({err}).", **where
        ) from err
