"""Applying an archive folder to live objects in place: state dicts into modules and optimizers,
``data`` values onto attributes, components recursively."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch

from .. import _core, _format  # _core: collect, the optimizer-state check and the registry, when used
from ..exceptions import ArchiveFormatError, ParameterMismatchError, UnsafeNameError, ZipsaveError
from ._app_state import check_live_entries, check_state_names
from ._inplace import adopt_live, fill_in_place
from ._parts import LEGACY_CHILD_PREFIX, MODULE_INTERNALS, Parts, is_stateful, unwrap
from ._session import LoadSession

__all__ = [
    "expected_state_names",
    "live_parts",
    "load_state_into",
    "restore_parts",
    "set_parameters_from_dict",
]


_LEGACY_TENSOR_REGISTRIES = frozenset({"_parameters", "_buffers"})


def restore_parts(
    src: LoadSession,
    obj: Any,
    folder: str,
    *,
    custom_objects: dict | None,
    exclude: list[str],
    exact_match: bool,
    set_data: bool,
    overrides: dict[str, Any] | None = None,
) -> Parts | None:
    """Load one folder's parts into ``obj`` in place (the core of load and restore). Returns
    the parts the live ``obj`` holds where ``exact_match`` collected them to compare."""
    is_dict = isinstance(obj, dict)
    live = None
    prefix = f"{folder}/" if folder else ""
    members = src.source.members_in(folder)
    names = [n[len(prefix) : -len(_format.PTH_SUFFIX)] for n in members if n.endswith(_format.PTH_SUFFIX)]
    variables_name = _format.PYTORCH_VARIABLES[: -len(_format.PTH_SUFFIX)]
    state_names = [n for n in names if n not in (variables_name, "tensors")]
    member_of = {n: n for n in state_names}
    if isinstance(obj, torch.nn.Module):
        # Before 0.2 a module's children were saved as `_modules.<name>.pth`.
        member_of = {n.removeprefix(LEGACY_CHILD_PREFIX): n for n in state_names}
        state_names = list(member_of)
    # what an exact restore needs is checked before anything is set, so that a mismatch leaves obj as it was
    if exact_match and not is_dict:
        live = _check_state_names(src, obj, folder, state_names, exclude)
    if exact_match and is_dict:
        check_live_entries(src, obj, folder, state_names, exclude)
    if set_data:
        # A module's registries and hooks are torch's, never restored (archives before 0.2
        # saved them in `data`); their saved parameters and buffers still load, in place.
        internals = sorted(MODULE_INTERNALS - _LEGACY_TENSOR_REGISTRIES) if isinstance(obj, torch.nn.Module) else []
        data = src.decode_data(folder, custom_objects=custom_objects, exclude=list(exclude) + internals) or {}
        owner = None if is_dict else next((h for h in _core.handlers(live=True) if h.claims(obj)), None)
        if owner is not None:  # what the integration's own load checks (SB3's: no live handle, no class where it calls)
            data = owner.checked_data(src, obj, data, set(custom_objects or ()))
        data_member = _format.join(folder, _format.DATA)
        for key, value in data.items():
            if overrides and key in overrides:
                continue
            if key in _LEGACY_TENSOR_REGISTRIES and isinstance(obj, torch.nn.Module):
                for name, tensor in value.items() if isinstance(value, dict) else ():
                    where = {"archive": src.name, "member": data_member, "key": f"{key}.{name}"}
                    if "." in str(name):  # a registry holds the module's own entries: `weight`, never `0.weight`
                        raise UnsafeNameError(f"{key}.{name}", "is not an entry of the module's own registry", **where)
                    _core.set_variable(obj, str(name), tensor, **where)
                continue
            if not is_dict:
                _core.check_data_key(obj, key, archive=src.name, member=data_member, key=key)
            if is_dict:
                if key in obj and is_stateful(obj[key]):
                    if isinstance(value, dict) or exact_match:  # one without tensors (a scheduler's) stays in `data`
                        _load_data_state(src, obj[key], value, data_member, key, exact_match)
                    continue
                obj[key] = fill_in_place(obj.get(key), adopt_live(obj.get(key), value))
            elif _keeps_live_device(getattr(obj, key, None), value):
                continue
            elif _fill_container(src, obj, folder, key, value):
                continue
            else:
                current = getattr(obj, key, None)
                value = adopt_live(current, value)
                if value is not current:
                    _set_attribute(obj, key, value)
    for name in state_names:
        member = prefix + member_of[name] + _format.PTH_SUFFIX
        if exclude and _core.matches(name, exclude):
            continue
        if is_dict and member in src.reader.state_dict_values and not is_stateful(obj.get(name)):
            _restore_value(src, obj, name, member, custom_objects)
            continue
        try:
            target = obj[name] if is_dict else _core.resolve(obj, name, archive=src.name, member=member)
        except (AttributeError, KeyError):
            if is_dict:
                err = ParameterMismatchError(
                    f"the app state has no key `{name}` to restore this state dict into (its keys: {sorted(map(str, obj))}).",
                    archive=src.name,
                    member=member,
                    hint=f"Pass the object it was saved from under that key, `exclude=[{name!r}]` to leave it out, "
                    "or `exact_match=False` to restore the entries that match.",
                )
            else:
                err = ParameterMismatchError(
                    f"`{name}` is not an attribute of {type(obj).__name__}.", archive=src.name, member=member
                )
            if exact_match:
                raise err from None
            src.skip(member, None, None, err)
            continue
        try:
            load_state_into(src, member, unwrap(target), exact_match)
        except ParameterMismatchError:
            raise
        except ZipsaveError as err:
            src.skip(member, None, None, err)
    var_member = prefix + _format.PYTORCH_VARIABLES
    if var_member in src.reader and is_dict:  # an app state's sparse tensors: values, as in `data`
        variables, _ = src.load_tensors(var_member)
        for name, value in (variables if isinstance(variables, dict) else {}).items():
            if isinstance(name, str) and not (exclude and _core.matches(name, exclude)):
                obj[name] = value
    if var_member in src.reader and not is_dict:
        try:
            variables, _ = src.load_tensors(var_member)
        except ZipsaveError as err:
            src.skip(var_member, None, None, err)
            variables = {}
        for name, value in (variables or {}).items():
            if exclude and _core.matches(name, exclude):
                continue
            _core.set_variable(obj, name, value, archive=src.name, member=var_member, key=name)
    return live


def _check_state_names(
    src: LoadSession, obj: Any, folder: str, state_names: list[str], exclude: list[str]
) -> Parts | None:
    """An exact restore: the object holds a state dict for each the archive has, and the other
    way round, checked before anything is set (a SAC archive restored into a PPO must leave the
    PPO as it was). Returns the live parts collected to compare."""
    live = live_parts(obj)
    expected = expected_state_names(obj, live)
    if expected is not None and exclude:
        # what the caller left out (``exclude=["*.optimizer"]``) is missing on purpose
        expected = [n for n in expected if not _core.matches(n, exclude)]
    kept = {n for n in state_names if not (exclude and _core.matches(n, exclude))}
    if expected is not None:
        check_state_names(src, obj, folder, state_names, expected, kept)
    return live


def _load_data_state(src: LoadSession, target: Any, state: Any, member: str, key: str, exact_match: bool) -> None:
    """A state dict given as a value of the app state and kept in ``data`` (one without a tensor,
    such as an LR scheduler's: ``{"scheduler": scheduler.state_dict()}``) goes into the live
    stateful object the dict holds at its key, as a ``.pth`` member's would."""
    target = unwrap(target)
    try:
        if not isinstance(state, dict):
            raise TypeError(f"the archive holds a {type(state).__name__} there, not a state dict")
        if isinstance(target, torch.nn.Module):
            target.load_state_dict(state, strict=exact_match)
        else:
            target.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
        raise ParameterMismatchError(
            f"does not fit the {type(target).__name__} the app state holds: {type(err).__name__}: {err}.",
            archive=src.name,
            member=member,
            key=key,
            hint=f"Pass the object it was saved from, `exclude=[{key!r}]` to leave it out, or load the archive "
            "with `zipsave.load(path)` to look at the value.",
        ) from err


def _restore_value(src: LoadSession, app: dict, key: str, member: str, custom_objects: dict | None) -> None:
    """A state dict saved as a value of the app state goes back as a ``data`` value does: into
    the live one in place (the same tensors, the same dict); ``custom_objects`` replaces it
    unread. A live stateful object (a module the manifest calls a value) is no value: the caller
    loads the member into it as its state, as without the manifest's word."""
    if custom_objects and key in custom_objects:
        tree = custom_objects[key]
    else:
        try:
            tree, _ = src.load_tensors(member)
        except ZipsaveError as err:
            src.skip(member, None, None, err)
            return
    app[key] = fill_in_place(app.get(key), adopt_live(app.get(key), tree))


def live_parts(obj: Any) -> Parts | None:
    """The parts ``obj`` would be saved as; ``None`` where SB3's hook names its state dicts or
    it cannot be collected."""
    if hasattr(obj, "_get_torch_save_params"):
        return None
    try:
        return _core.collect(obj, None, None)
    except ZipsaveError:
        return None


def expected_state_names(obj: Any, parts: Parts | None = None) -> list[str] | None:
    if hasattr(obj, "_get_torch_save_params"):
        return list(obj._get_torch_save_params()[0])
    parts = parts or live_parts(obj)
    return [name for name, _ in parts.state] if parts is not None else None


def _fill_container(src: LoadSession, obj: Any, folder: str, key: str, saved: Any) -> bool:
    """Put the plain values of a saved container into the live one, keeping the live items
    whose state is stored as members (`nets.pi.pth`) or component folders (`agents/0`): they
    are restored in place next. ``False`` when ``key`` is no such container."""
    live = getattr(obj, key, None)
    if type(live) is not type(saved) or not isinstance(live, (list, tuple, dict)):
        return False  # most data keys: no member list to scan
    prefix = f"{folder}/{key}" if folder else key
    # What is held below the container: `<key>/...` folders and members, and `<key>.<i>....pth`
    # members beside it, found from the archive's folder index (no scan of every member name).
    below = {n.rpartition("/")[2] for n in src.source.members_in(prefix)} | set(src.source.subfolders(prefix))
    beside = [
        n
        for n in src.source.members_in(prefix.rpartition("/")[0])
        if n.startswith(prefix + ".") and n.endswith(_format.PTH_SUFFIX)
    ]
    filled = _fill(beside, live, saved, prefix, below=below)
    if filled is _NOT_FILLED:
        return False
    if filled is not live:
        setattr(obj, key, filled)  # a tuple, rebuilt
    return True


_NOT_FILLED = object()


def _fill(names: list[str], live: Any, saved: Any, prefix: str, *, below: set[str] | frozenset = frozenset()) -> Any:
    """``names``: the ``<prefix>.<...>.pth`` members; ``below``: what ``<prefix>/`` holds.
    Each level hands its items only their own members, so the work is linear in the names."""
    if type(live) is not type(saved) or not isinstance(live, (list, tuple, dict)):
        return _NOT_FILLED
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name[len(prefix) + 1 :].split(".")[0], []).append(name)
    held = set(groups) | below
    if not held:
        return _NOT_FILLED
    if isinstance(live, dict):
        for k, value in saved.items():
            if value is None and is_stateful(live.get(k)):
                continue  # its place, left empty: the item was left out of the save (`exclude=`)
            if str(k) in held and k in live:
                inner = _fill(groups.get(str(k), []), live[k], value, f"{prefix}.{k}")
                if inner is not _NOT_FILLED:
                    live[k] = inner
            else:
                live[k] = adopt_live(live.get(k), value)
        return live
    if len(live) != len(saved):
        return _NOT_FILLED  # replaced whole; the members then name what does not fit
    merged = []
    for i, value in enumerate(saved):
        if value is None and is_stateful(live[i]):
            merged.append(live[i])  # left out of the save (`exclude=`)
        elif str(i) in held:
            inner = _fill(groups.get(str(i), []), live[i], value, f"{prefix}.{i}")
            merged.append(live[i] if inner is _NOT_FILLED else inner)
        else:
            merged.append(adopt_live(live[i], value))
    if isinstance(live, list):
        live[:] = merged
        return live
    return type(live)(*merged) if hasattr(type(live), "_fields") else type(live)(merged)


def _set_attribute(obj: Any, key: str, value: Any) -> None:
    """``setattr``, also on a frozen dataclass: its saved fields are what its constructor set
    (``object.__setattr__``, as the dataclass's own ``__init__`` does)."""
    try:
        setattr(obj, key, value)
    except dataclasses.FrozenInstanceError:
        object.__setattr__(obj, key, value)


def _keeps_live_device(target: Any, value: Any) -> bool:
    """A saved ``torch.device`` says where the model ran, not where it runs now: the object's
    own (its constructor's choice on this machine, or the live object's) stays, as the tensors
    restored into it stay on their devices (``device=`` moves them)."""
    return isinstance(target, torch.device) and isinstance(value, torch.device)


def load_state_into(src: LoadSession, member: str, target: Any, exact_match: bool) -> None:
    if isinstance(target, torch.nn.Module):
        state = target.state_dict(keep_vars=True)
        # Lazy modules' parameters have no shape yet (LazyLinear before its first call): they
        # are read fresh, and load_state_dict materialises them, as torch's own load does.
        current = {k: v for k, v in state.items() if not torch.nn.parameter.is_lazy(v)}

        def fits_module(tree: Any) -> None:  # checked before any byte lands in the module
            if not isinstance(tree, dict):
                raise ArchiveFormatError(f"holds a {type(tree).__name__}, expected a state dict.")
            if exact_match and set(tree) != set(state):
                missing = sorted(set(state) - set(tree))
                unexpected = sorted(set(tree) - set(state))
                raise ParameterMismatchError(
                    f"state dict does not match the module: missing keys {missing}, unexpected keys {unexpected}.",
                    hint="Pass `exact_match=False` to load the keys that match.",
                )

        tree, _filled = src.load_tensors(
            member, current, check_shapes=True, check_dtypes=exact_match, validate=fits_module
        )
        try:
            # Tensors filled in place are passed as themselves: copy_ of a tensor onto itself
            # is a no-op, and the module's load hooks still run.
            target.load_state_dict(tree, strict=exact_match)
        except RuntimeError as err:
            raise ParameterMismatchError(f"does not fit the module: {err}", archive=src.name, member=member) from err
        return
    if isinstance(target, torch.optim.Optimizer):
        current_state = target.state_dict()

        def fits_optimizer(tree: Any) -> None:
            groups = tree.get("param_groups") if isinstance(tree, dict) else None
            live = [len(g["params"]) for g in current_state["param_groups"]]
            if not isinstance(groups, list):
                raise ParameterMismatchError("optimizer state has no `param_groups` list.")
            saved = [len(g.get("params", ())) for g in groups if isinstance(g, dict)]
            if saved != live:
                raise ParameterMismatchError(
                    f"optimizer state does not match the optimizer: its parameter groups hold {saved} "
                    f"parameters, the optimizer's hold {live}.",
                    hint="Build the optimizer with the same parameter groups as the saved one (groups added "
                    "after construction with `add_param_group` must be added before loading), or leave "
                    "its state out with `exclude=`.",
                )
            _core.check_optimizer_state(target, tree)  # the tensors a fresh optimizer has none of yet

        tree, _ = src.load_tensors(member, current_state, check_shapes=True, validate=fits_optimizer)
        _core.check_optimizer_numbers(tree, archive=src.name, member=member)  # read now
        try:
            target.load_state_dict(tree)
        except (ValueError, KeyError, RuntimeError) as err:
            raise ParameterMismatchError(f"does not fit the optimizer: {err}", archive=src.name, member=member) from err
        return
    if is_stateful(target):
        existing: Any = None
        with contextlib.suppress(Exception):
            existing = target.state_dict()
        tree, _ = src.load_tensors(member, existing)
        try:
            _core.load_stateful(target, tree)
        except ParameterMismatchError as err:
            if err.archive or err.member:
                raise
            # An object of zipsave's (EnvState) knows what differs, not where it was read from.
            raise ParameterMismatchError(
                err.detail, archive=src.name, member=member, key=err.key, hint=err.hint
            ) from err
        return
    raise ParameterMismatchError(
        f"cannot load a state dict into {type(target).__name__} (it has no `load_state_dict`).",
        archive=src.name,
        member=member,
    )


def set_parameters_from_dict(obj: Any, params: dict[str, Any], *, exact_match: bool = True) -> None:
    """Load ``{name: state_dict}`` into the matching attributes of ``obj``."""
    expected = expected_state_names(obj)
    if exact_match and expected is not None and set(params) != set(expected):
        raise ParameterMismatchError(
            f"got state dicts {sorted(params)}, but the object has {sorted(expected)}.",
            hint="Pass `exact_match=False` to load the ones that match.",
        )
    for name, state in params.items():
        try:
            target = unwrap(_core.resolve(obj, name, key=name))
        except AttributeError:
            raise ParameterMismatchError(f"`{name}` is not an attribute of {type(obj).__name__}.", key=name) from None
        try:
            if isinstance(target, torch.nn.Module):
                target.load_state_dict(state, strict=exact_match)
            else:
                if isinstance(target, torch.optim.Optimizer):
                    _core.check_optimizer_state(target, state)
                    target.load_state_dict(state)
                else:
                    _core.load_stateful(target, state)
        except (RuntimeError, ValueError, KeyError) as err:
            raise ParameterMismatchError(f"does not fit: {err}", key=name) from err
