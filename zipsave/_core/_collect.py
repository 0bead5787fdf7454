"""Collecting: an object -> its archive parts (``data`` values, state dicts, loose tensors,
components), by a registered handler, as app state, or by attribute discovery."""

from __future__ import annotations

import collections
import copy
import functools
import os
import types
from typing import Any, Iterable

import numpy as np
import torch

from .. import _core  # _core: the glob rules, train/eval modes and the registry (not a dict), on first use
from .._tensors import is_state_dict
from ..exceptions import EncodeError
from ._component import Component
from ._names import check_key, check_text, name_problem, names_member
from ._parts import (
    ALWAYS_EXCLUDED_PREFIXES,
    MODULE_INTERNALS,
    PLAIN_VALUES,
    Parts,
    container_items,
    is_environment,
    is_live_handle,
    is_stateful,
    recursive_getattr,
    unwrap,
)

__all__ = ["collect"]


def collect(obj: Any, exclude: Iterable[str] | None, include: Iterable[str] | None, *, top: bool = False) -> Parts:
    """Split an object into the parts the archive stores. A pattern with a ``/`` names a
    component (``agents/1``); one below a component (``learner/opt``) is its component's.
    ``top``: ``obj`` is what the caller saves, refused where its attributes are not its state."""
    deep = [p for p in exclude or () if "/" in p and p not in set(include or ())]
    exclude = {p for p in exclude or () if "/" not in p}
    include = {p for p in include or () if "/" not in p}
    if isinstance(obj, Parts):
        return obj  # a component collected by its owner (SB3's replay buffer, VecNormalize)
    if isinstance(obj, torch.nn.Module):
        obj = unwrap(obj)  # `torch.compile(agent)`: the agent, its class recorded, its members un-prefixed
    if isinstance(obj, dict):
        return _collect_app_state(obj, exclude, include)
    if not isinstance(obj, Component):
        for handler in _core.handlers(live=True):
            if handler.claims(obj):
                return handler.collect(obj, exclude=exclude, include=include)
    if top:
        _refuse_top_level(obj)
    attrs = instance_attributes(obj)
    if not hasattr(obj, "__dict__") and not attrs:
        raise EncodeError(
            f"cannot save an object of type {type(obj).__name__}: expected a Saveable, an object with "
            "attributes, or a dict of stateful objects and values.",
            hint="The object comes first: `zipsave.save(model, path)`."
            if isinstance(obj, (str, os.PathLike))
            else None,
        )
    excluded = set(getattr(obj, "_excluded_save_params", lambda: ())()) | exclude
    excluded -= include
    data: dict[str, Any] = {}
    state: list[tuple[str, Any]] = []
    variables: dict[str, torch.Tensor] = {}
    components: list[tuple[str, Any]] = []
    seen: dict[int, str] = {}
    covered: set[int] = set()  # sub-modules and parameters already inside a saved state dict

    hooks = getattr(obj, "_get_torch_save_params", None)
    if callable(hooks):
        # SB3's hook names what is torch-saved; discovery then only looks for components.
        state_names, var_names = hooks()
        for name in list(state_names) + list(var_names):
            excluded.add(name.split(".")[0])
        state.extend((name, unwrap(recursive_getattr(obj, name))) for name in state_names)
        variables.update((name, recursive_getattr(obj, name)) for name in var_names)
    patterns = [p for p in exclude if p not in include]

    def left_out(name: str) -> bool:
        """Named by `_excluded_save_params`/`exclude`, or matched by an `exclude` glob."""
        return name in excluded or (name not in include and _core.matches(name, patterns))

    for name, value in attrs.items():
        if name.startswith(ALWAYS_EXCLUDED_PREFIXES) or left_out(name):
            continue
        if isinstance(value, torch.nn.Module):
            module = unwrap(value)
            for sub in module.modules():
                covered.add(id(sub))
            for tensor in list(module.parameters()) + list(module.buffers()):
                covered.add(id(tensor))
    for name, value in attrs.items():
        if name.startswith(ALWAYS_EXCLUDED_PREFIXES) or left_out(name):
            continue
        if isinstance(value, Component):
            components.append((name, value))
        elif isinstance(value, dict) and value and all(isinstance(v, Component) for v in value.values()):
            for key, comp in value.items():
                problem = (
                    name_problem(key, folder=True, prefix=f"{name}/", portable=False)
                    if isinstance(key, str)
                    else _NOT_STR
                )
                if problem is not None:
                    raise EncodeError(
                        f"the dict of components `{name}` has the key {key!r}: {problem[0]}; nothing was written.",
                        key=name,
                        hint=problem[1],
                    )
                components.append((f"{name}/{key}", comp))
        elif isinstance(value, torch.nn.Module):
            module = unwrap(value)
            if id(module) in seen or (id(module) in covered and not _is_root(module, attrs)):
                continue  # an alias, or a piece of another saved module
            _add_state(name, module, state, seen)
        elif _splits(value, top=True):
            # A container of modules, optimizers or components, alone (`self.critics = [q1, q2]`)
            # or among plain values (`self.nets = {"pi": net, "lr": 3e-4}`), nested too: each
            # stateful item becomes its own member (`nets.pi.pth`) or folder (`agents/0`), the
            # plain rest stays in `data` with `null` where they were; loading fills the live one.
            rest, plain = _split(name, value, state, components, seen, top=True)
            if plain:
                data[name] = rest
        elif isinstance(value, torch.Tensor):
            if id(value) in covered or id(value) in seen:
                continue
            seen[id(value)] = name
            variables[name] = value
        # Live handles first: a gymnasium 0.29 wrapper forwards `state_dict` to its env, warning.
        elif not is_live_handle(value) and is_stateful(value):
            if id(value) in seen:
                continue
            seen[id(value)] = name
            state.append((name, value))
        elif is_live_handle(value) and name not in include:
            continue
        elif holds_state(value):
            # A plain object holding modules or optimizers (`self.runner = Runner(net, opt)`):
            # a component folder without init.json, restored into the live object the
            # constructor made. In `data` it was pickled whole, weights and all.
            components.append((name, value))
        else:
            data[name] = value
    if patterns:
        # Paths below an attribute: `policy.optimizer`, `*.optimizer`, `nets.vf`, `agents/1`.
        state = [(n, v) for n, v in state if not left_out(n)]
        variables = {n: v for n, v in variables.items() if not left_out(n)}
        components = [(n, v) for n, v in components if not left_out(n)]
    if deep:
        components = [(n, v) for n, v in components if not _core.matches(n, deep)]
    init = None
    if isinstance(obj, Component):
        init = obj._zipsave_init_record()
        modes = _core.module_modes(obj, state)
        if modes:
            init["modes"] = modes
    return Parts(data, state, variables, components, init)


_NOT_STR = ("component keys must be strings (they become folder names)", "Use strings, e.g. `'0'`.")

# Leaves that are never stateful, skipped without a look (a list of a million floats).
_LEAVES = PLAIN_VALUES | {torch.Tensor}


def _splits(value: Any, *, top: bool, depth: int = 0) -> bool:
    """A container holding, at any depth, a module or optimizer (or, directly in an attribute,
    a component) among other values."""
    if type(value) in _LEAVES or depth > 20:
        return False
    items = container_items(value)
    if items is None:
        return False
    for _, v in items:
        if type(v) in _LEAVES:
            continue
        if (top and (isinstance(v, Component) or holds_state(v))) or (is_stateful(v) and not is_live_handle(v)):
            return True
        if _splits(v, top=False, depth=depth + 1):
            return True
    return False


def _split(name: str, value: Any, state: list, components: list, seen: dict[int, str], *, top: bool) -> tuple[Any, int]:
    """``value`` with its stateful items taken out (into ``state`` / ``components``) and
    ``None`` in their place, and how many plain values are left."""
    rest: Any = copy.copy(value) if isinstance(value, dict) else list(value)  # an OrderedDict stays one
    plain = 0
    for key, item in container_items(value) or ():
        if top and (isinstance(item, Component) or holds_state(item)):
            check_key(str(key), item, folder=True, prefix=f"{name}/")
            components.append((f"{name}/{key}", item))
            rest[key] = None
        elif is_stateful(item) and not is_live_handle(item):
            check_key(str(key), item, prefix=f"{name}.")
            item = unwrap(item)
            if id(item) not in seen:
                _add_state(f"{name}.{key}", item, state, seen)
            rest[key] = None
        elif _splits(item, top=False):
            rest[key], inner = _split(f"{name}.{key}", item, state, components, seen, top=False)
            plain += inner
        else:
            plain += 1
    if isinstance(value, tuple):
        rest = type(value)(*rest) if hasattr(type(value), "_fields") else tuple(rest)
    return rest, plain


def _add_state(name: str, item: Any, state: list, seen: dict[int, str]) -> None:
    """Save ``item`` as the member ``name``, and the optimizers, LR schedulers and other stateful
    attributes of a module and of its sub-modules beside it (SB3's ``policy.optimizer``;
    ``policy.actor.optimizer``, ``policy.scheduler``, ``critics.0.optimizer``)."""
    seen[id(item)] = name
    state.append((name, item))
    if isinstance(item, torch.nn.Module):
        for sub_name, sub in item.named_modules():
            prefix = f"{name}.{sub_name}" if sub_name else name
            for attr_name, attr in vars(sub).items():
                if type(attr) in _LEAVES or isinstance(attr, (dict, list, tuple, torch.nn.Module)) or id(attr) in seen:
                    continue  # torch's registries and flags, children
                if not is_live_handle(attr) and is_stateful(attr):  # an optimizer, an LR scheduler, a GradScaler
                    seen[id(attr)] = f"{prefix}.{attr_name}"
                    state.append((f"{prefix}.{attr_name}", attr))


_NOT_OBJECTS = (
    type,
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    types.ModuleType,
    functools.partial,
    dict,
    list,
    tuple,
    set,
    frozenset,
    np.generic,
    torch.Tensor,
    Component,
    torch.nn.Module,
    torch.optim.Optimizer,
)


def holds_state(value: Any, depth: int = 0) -> bool:
    """A plain object (no ``Saveable``, no ``state_dict``) whose attributes hold a module, an
    optimizer or another stateful object, directly, in a container, or in such an object.
    One that holds a ``Saveable`` (perhaps its owner) is left as it was: a ``data`` value."""
    if type(value) in _LEAVES or depth > 4 or isinstance(value, _NOT_OBJECTS):
        return False
    try:
        attrs = instance_attributes(value)
    except Exception:  # noqa: BLE001 - an object whose attributes cannot be read stays a value
        return False
    found = False
    for item in attrs.values():
        if type(item) in _LEAVES:
            continue
        if isinstance(item, Component):
            return False
        if found or is_live_handle(item):  # live handles first: a gymnasium 0.29 wrapper warns on state_dict
            continue
        if is_stateful(item) or _splits(item, top=False) or holds_state(item, depth + 1):
            found = True
    # Checked last: most objects hold no state, and these two are the slow checks.
    return found and not is_live_handle(value) and not is_stateful(value)


@functools.lru_cache(maxsize=1024)
def _slot_names(klass: type) -> tuple[str, ...]:
    """The ``__slots__`` names of a class and its bases, mangled where Python mangles them."""
    names = []
    for cls in reversed(klass.__mro__):
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot in ("__dict__", "__weakref__"):
                continue
            if slot.startswith("__") and not slot.endswith("__"):  # stored under its mangled name
                slot = f"_{cls.__name__.lstrip('_')}{slot}"
            names.append(slot)
    return tuple(names)


def instance_attributes(obj: Any) -> dict[str, Any]:
    """An object's attributes: those set in ``__slots__`` (anywhere in its class's MRO) and its
    ``__dict__`` (for a ``torch.nn.Module``, its children, parameters and persistent buffers). Slots hold no ``__dict__`` entry, so ``vars(obj)`` alone would miss them and
    a load would hand back the constructor's fresh values in their place."""
    attrs: dict[str, Any] = {}
    try:
        slots = _slot_names(type(obj))  # type: ignore[arg-type]  # classes hash by identity
    except TypeError:  # a metaclass that makes its classes unhashable
        slots = _slot_names.__wrapped__(type(obj))
    for slot in slots:
        try:
            attrs[slot] = getattr(obj, slot)
        except AttributeError:  # declared, never set
            continue
    attrs.update(getattr(obj, "__dict__", {}))
    if isinstance(obj, torch.nn.Module):
        # A model that is itself a module (``class Agent(zipsave.Saveable, nn.Module)``): its
        # attributes are its children, parameters and buffers, not torch's registries and hooks.
        attrs = {k: v for k, v in attrs.items() if k not in MODULE_INTERNALS}
        attrs.update((k, v) for k, v in obj._modules.items() if v is not None)
        attrs.update((k, v) for k, v in obj._parameters.items() if v is not None)
        attrs.update(
            (k, v) for k, v in obj._buffers.items() if v is not None and k not in obj._non_persistent_buffers_set
        )
    return attrs


def _is_root(module: torch.nn.Module, attrs: dict) -> bool:
    """True when no other module attribute contains ``module``."""
    for other in attrs.values():
        if isinstance(other, torch.nn.Module) and unwrap(other) is not module:
            if any(sub is module for sub in unwrap(other).modules()):
                return False
    return True


def _refuse_top_level(obj: Any) -> None:
    """Refuse, before anything is written, an object whose attributes are not its state: a
    tensor's or a function's ``__dict__`` is empty (the archive would hold nothing of it), an
    optimizer's or LR scheduler's hold references to live parameters (restored into those, they
    would overwrite a model's weights), and a live handle has no state to keep."""
    if isinstance(obj, Component):
        return  # a Saveable says what it holds
    what = f"{type(obj).__module__}.{type(obj).__qualname__}"
    if isinstance(obj, (torch.Tensor, np.ndarray, np.generic)):
        kind, hint = "a tensor or array", "Name it in a dict: `zipsave.save({'weights': value}, path)`."
    elif isinstance(obj, (torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)):
        kind = "an optimizer or LR scheduler, whose attributes are references to live parameters"
        hint = (
            "Save its state in a dict, with the model it optimizes: `zipsave.save({'policy': net, 'optimizer': "
            "optimizer}, path)`, and `zipsave.restore({'policy': net, 'optimizer': optimizer}, path)` to load it."
        )
    elif callable(obj) and isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        kind, hint = "a function or class, not an object with state", "Save an instance that holds the state."
    elif is_live_handle(obj):
        kind = "a live handle (an environment, a logger, a file, a lock, ...), which an archive cannot hold"
        hint = (
            "Save the model that uses it, or an environment's state with `zipsave.save({'env': "
            "zipsave.EnvState(env)}, path)`."
            if is_environment(obj)
            else "Save the object that holds the state instead."
        )
    else:
        return
    raise EncodeError(f"cannot save {what} as the object of an archive: it is {kind}; nothing was written.", hint=hint)


def _nested_app_state(key: str, value: Any) -> bool:
    """A dict holding stateful objects (``{"models": {"actor": actor, "critic": critic}}``) is an
    app state of its own, a folder; before, it was pickled whole into ``data``, modules and all,
    where no safe load could read it. A list or tuple of them has no folder form: an error that
    says to use a dict, rather than such a pickle."""
    if type(value) in (dict, collections.OrderedDict):
        return _splits(value, top=True)
    if isinstance(value, (list, tuple)) and _splits(value, top=True):
        raise EncodeError(
            "holds modules, optimizers or other stateful objects in a list or tuple, which an app state saves "
            "only in a dict; nothing was written.",
            key=key,
            hint=f"Use a dict, `{{{key!r}: {{'0': ..., '1': ...}}}}`, or give each its own key.",
        )
    return False


def _collect_app_state(app: dict, exclude: set, include: set) -> Parts:
    data: dict[str, Any] = {}
    state: list[tuple[str, Any]] = []
    components: list[tuple[str, Any]] = []
    values: dict[str, int] = {}
    variables: dict[str, torch.Tensor] = {}
    for place, (key, value) in enumerate(app.items()):
        if not isinstance(key, str):
            raise EncodeError(f"app-state keys must be strings, found {key!r}.")
        if key in exclude and key not in include:
            continue
        check_text(key)
        if is_live_handle(value) and key not in include:
            raise EncodeError(
                f"holds {type(value).__module__}.{type(value).__qualname__}, a live handle (an environment, a "
                "logger, a file, a lock, ...), which an archive cannot hold; nothing was written.",
                key=key,
                hint=(
                    f"Put the environment's state there instead, `{{{key!r}: zipsave.EnvState(env)}}`: it saves "
                    "and restores a gymnasium Env, a SyncVectorEnv or an SB3 DummyVecEnv with their wrappers "
                    "(normalization and episode statistics, random generators; docs/checkpointing.rst, "
                    "'Environments: keep the normalization statistics')."
                    if is_environment(value)
                    else "Leave it out of the app state."
                ),
            )
        if is_stateful(value):
            check_key(key, value)
            state.append((key, unwrap(value)))
        elif isinstance(value, Component) or holds_state(value) or _nested_app_state(key, value):
            check_key(key, value, folder=True)
            components.append((key, value))  # a model, or a dict of them, in the app state: its own folder
        elif names_member(key) and is_state_dict(value):
            # `{"model": model.state_dict()}`: a `.pth` member, as the module's own would be,
            # not tensors in JSON beside a pickled copy; a value the reader would not give back
            # as it was (a numpy array inside) stays in `data`.
            state.append((key, value))
            values[key] = place
        elif isinstance(value, torch.Tensor) and value.layout != torch.strided:
            variables[key] = value  # a sparse tensor: `pytorch_variables.pth`, as a model's (no native form)
        else:
            data[key] = value
    return Parts(data, state, variables or None, components, app_state=True, state_values=values)
