"""Rebuilding objects from an archive folder: the class its ``init.json`` names (or the caller's,
or a handler's), constructed, then restored in place (:mod:`._folders` says what a folder is)."""

from __future__ import annotations

import inspect as _inspect
from typing import Any

from .. import _core, _format  # _core: what only a build, a live comparison or a handler uses, on first use
from .._archive import saved_as_app_state
from .._codec import NATIVE_KEY
from ..exceptions import (
    ArchiveFormatError,
    DecodeError,
    ParameterMismatchError,
    UnsafeNameError,
    ZipsaveError,
    named_key,
)
from ._apply import restore_parts
from ._folders import handler_for
from ._parts import Parts, index_of
from ._session import LoadSession

__all__ = ["build", "restore_target", "restore_tree"]


def build(
    src: LoadSession,
    folder: str,
    *,
    cls: Any,
    custom_objects: dict | None,
    exclude: list[str],
    overrides: dict[str, Any],
    exact_match: bool = True,
) -> Any:
    """Construct a fresh object from ``init.json`` (or ``cls``), then restore into it."""
    init_member = _format.join(folder, _format.INIT)
    # Read once: an edited init.json is reported once, and the handler check reuses it.
    has_init = src.has(init_member)
    stored = src.read_json(init_member) if has_init else None
    handler = handler_for(src, folder, cls, record=stored)
    if handler is not None:
        return handler.build(src, folder, cls=cls, custom_objects=custom_objects, exclude=exclude, overrides=overrides)
    if not has_init:
        if cls is None:
            raise ArchiveFormatError(
                "has no init.json, so zipsave does not know what to build.",
                archive=src.name,
                member=init_member,
                hint="Pass `cls=` (e.g. `zipsave.load(path, cls=PPO, env=env)`), or use `load_archive`/`restore`.",
            )
        record: Any = {"args": {}}
    else:
        record = stored
        if not isinstance(record, dict) or not isinstance(record.get("args", {}), dict):
            raise ArchiveFormatError(
                "must hold an object with `class` and `args`.", archive=src.name, member=init_member
            )
        positional = record.get("positional", [])
        if not (
            isinstance(positional, list)
            and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in positional)
        ):
            raise ArchiveFormatError(
                "`positional` must be a list of [name, value] pairs.", archive=src.name, member=init_member
            )
    klass = _core.resolve_class(src, record, init_member, cls)
    raw_args = record.get("args", {})
    built: dict[str, Any] = dict(custom_objects or {})
    for key, raw in raw_args.items():
        native = raw.get(NATIVE_KEY) if isinstance(raw, dict) else None
        if isinstance(native, dict) and native.get("kind") == "component" and key not in built:
            child = _format.join(folder, str(native.get("path", "")))
            if key in overrides:
                built[key] = overrides[key]
                continue
            built[key] = build(
                src,
                child,
                cls=None,
                custom_objects=None,
                exclude=_core.nested(exclude, str(native.get("path"))),
                overrides={},
                exact_match=exact_match,
            )
            src.built_components.add(child)
    args = src.decode_entries(raw_args, init_member, custom_objects=built or None)
    by_position = _positional(src, record.get("positional", []), init_member, overrides)

    params: Any
    try:
        params = _inspect.signature(klass.__init__).parameters
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        params, accepts_any = {}, True
    late: dict[str, Any] = {}
    taken = {name for name, _ in record.get("positional", [])}
    for key, value in overrides.items():
        if key in taken:
            continue  # went in by position
        if key in params or accepts_any:
            args[key] = value
        else:
            late[key] = value
    by_position = _before_star_args(params, record.get("positional", []), by_position, args)
    try:
        obj = klass(*by_position, **args)
    except Exception as err:
        unset = [key for key, value in args.items() if value is None and key not in overrides]
        hint = "Pass the missing or broken constructor arguments as keyword overrides to load()"
        skipped = [e for e in src.report.skipped if e.member == init_member and e.key in raw_args and e.key not in args]
        if skipped:
            # an argument the safe load refused (a class of the user's own): the fix is in its cause
            hint = (
                "These constructor arguments could not be decoded: "
                + " ".join(f"`{e.key}`: {named_key(e.cause, e.key)}" for e in skipped)
                + f" Or pass them as keyword overrides, e.g. `load(path, {skipped[0].key}=...)`"
            )
        elif unset:
            # Live handles (environments, loggers) are written as null: the likely culprit.
            hint += (
                f"; these were saved as None (environments and other live handles are never saved): "
                f"{', '.join(unset)}, e.g. `load(path, {unset[0]}=...)`"
            )
        recorded = record.get("class")
        if isinstance(recorded, str) and cls is not None and recorded != f"{cls.__module__}:{cls.__qualname__}":
            # the likely cause: another class's archive (`Agent.load` of a `Learner`'s)
            hint = (
                f"The archive holds a `{recorded}` (its init.json), not a {klass.__name__}: load it with that "
                f"class, or with `zipsave.load(path)`, which builds the class it records. " + hint
            )
        if isinstance(err, TypeError) and "missing" in str(err) and not skipped and not unset:
            hint += (
                " (modules and optimizers passed to the constructor are not recorded, their state is: pass them again)"
            )
        raise DecodeError(
            f"building {klass.__name__}(...) failed: {type(err).__name__}: {err}.",
            archive=src.name,
            member=init_member,
            hint=hint + ".",
        ) from err
    restore_tree(
        src,
        obj,
        folder,
        custom_objects=custom_objects,
        exclude=exclude,
        exact_match=exact_match,
        set_data=True,
        overrides=overrides,
        modes=True,
    )
    for key, value in late.items():
        setattr(obj, key, value)
    if "modes" in record:  # train/eval, as saved (`restore` leaves the live modes alone)
        _core.apply_modes(obj, record["modes"], f"archive `{src.name}`, member `{init_member}`")
    return obj


def _before_star_args(params: Any, pairs: list, by_position: list[Any], args: dict[str, Any]) -> list[Any]:
    """``by_position`` with the parameters that come before ``*args`` in ``params`` put in at
    their places: a constructor that took ``*args`` values took those by position too, but
    ``init.json`` keeps them by name (``Widths(4, 5, 2)``: ``width`` in ``args``, 5 and 2 in
    ``positional``). Each is taken out of ``args`` (the saved value, or the override), else its
    default, where an undecodable one was skipped."""
    if not any(name.startswith("*") for name, _ in pairs) or not params:
        return by_position
    named = {name: value for (name, _), value in zip(pairs, by_position) if not name.startswith("*")}
    stars = [value for (name, _), value in zip(pairs, by_position) if name.startswith("*")]
    out: list[Any] = []
    for param in list(params.values())[1:]:  # after `self`
        if param.kind is param.VAR_POSITIONAL:
            for name in params:
                if params[name].kind is param.POSITIONAL_OR_KEYWORD:
                    args.pop(name, None)
            return out + stars
        if param.kind is param.POSITIONAL_ONLY and param.name in named:
            out.append(named[param.name])
        elif param.name in args and param.kind is param.POSITIONAL_OR_KEYWORD:
            out.append(args[param.name])
        elif param.default is not param.empty:
            out.append(param.default)
        else:
            return by_position  # nothing to put there: the call says what is missing
    return by_position


def _positional(src: LoadSession, pairs: list, member: str, overrides: dict[str, Any]) -> list[Any]:
    """The values the constructor takes by position, in order. Unlike keyword arguments, one
    that cannot be decoded cannot be skipped (the rest would shift): it is an error. A
    positional-only parameter can be overridden by its name; ``*args`` values cannot."""
    decoder = src.decoder(member)
    values = []
    for name, raw in pairs:
        if name in overrides:
            values.append(overrides[name])
            continue
        try:
            values.append(decoder.decode_entry(name, raw))
        except Exception as err:  # noqa: BLE001 - reported with what to do
            fix = (
                "Values passed through `*args` are needed to rebuild the object: load with the trust the "
                "value needs (see the cause), or build the object yourself and use `restore`."
                if name.startswith("*")
                else f"Pass it as a keyword override: `load(path, {name}=...)`."
            )
            raise DecodeError(
                f"the constructor's positional argument `{name}` cannot be decoded ({type(err).__name__}: {err}).",
                archive=src.name,
                member=member,
                key=name,
                hint=fix,
            ) from err
    return values


def restore_target(src: LoadSession, obj: Any, folder: str, into: str | None) -> Any:
    """Where a restored component goes: ``into`` (an attribute path in ``obj``, ``""`` for
    ``obj`` itself), else the component's own path when ``obj`` has it, else ``obj``."""
    path = folder if into is None else into.strip("/")
    if not path:
        return obj
    parts = path.split("/")
    if into is None:
        first = obj.get(parts[0]) if isinstance(obj, dict) else getattr(obj, parts[0], None)
        if not isinstance(first, (_core.Component, dict)):
            return obj  # e.g. restore(algo.learner.module["p0"], other, component="learner/module/p1")
    target = obj
    for depth, part in enumerate(parts):
        found = target.get(part) if isinstance(target, dict) else getattr(target, part, None)
        if found is None:
            where = "/".join(parts[:depth]) or "the object"
            raise ParameterMismatchError(
                f"cannot restore component `{folder}` into `{path}`: {where} ({type(target).__name__}) has no `{part}`.",
                archive=src.name,
                hint='Pass `into="attribute/path"` to choose where it goes, or `into=""` for the object itself.',
            )
        target = found
    return target


def restore_tree(
    src: LoadSession,
    obj: Any,
    folder: str,
    *,
    custom_objects: dict | None,
    exclude: list[str],
    exact_match: bool,
    set_data: bool,
    overrides: dict[str, Any] | None = None,
    modes: bool = False,
) -> None:
    """Load a folder into ``obj`` in place, then its component folders: restored into the
    components ``obj`` has, rebuilt where it has none. With ``modes`` (``load``, not
    ``restore``) the components restored in place also take their saved train/eval modes."""
    live = restore_parts(
        src,
        obj,
        folder,
        custom_objects=custom_objects,
        exclude=exclude,
        exact_match=exact_match,
        set_data=set_data,
        overrides=overrides,
    )
    is_dict = isinstance(obj, dict)
    prefix = f"{folder}/" if folder else ""
    for child in src.child_components(folder):
        attr_path = child[len(prefix) :]
        if exclude and _core.matches(attr_path, exclude):
            continue
        parent, _, last = attr_path.rpartition("/")
        where = {"archive": src.name, "member": child}
        for part in attr_path.split("/"):
            _core.check_name(part, path=attr_path, **where)
        if "/" in parent:
            raise UnsafeNameError(attr_path, "nests components deeper than a container of components", **where)
        holder = _own(obj, parent, attr_path, where) if parent else obj
        if holder is None:  # a dict of components the constructor did not create
            holder = {}
            if is_dict:
                obj[parent] = holder
            else:
                _core.check_data_key(obj, parent, **where)
                setattr(obj, parent, holder)
        if isinstance(holder, dict):
            current = holder.get(last)
        elif isinstance(holder, (list, tuple)):  # `self.agents = [a, b]`: folders agents/0, agents/1
            index = index_of(last)
            if index is None:
                raise ArchiveFormatError(
                    f"is a component `{last}` of the list `{parent}`, whose items are named by their index (0, 1, ...).",
                    **where,
                )
            current = holder[index] if index < len(holder) else None
        else:
            current = _own(holder, last, attr_path, where)
        if not is_dict and any(h.restore_component(src, obj, attr_path) for h in _core.handlers(live=True)):
            continue  # a handler filled it itself (SB3's replay buffer, VecNormalize)
        if child in src.built_components and isinstance(current, _core.Component):
            continue  # built (and restored) from its folder before the constructor ran
        plain = not src.has(_format.join(child, _format.INIT))  # a plain object's folder (`holds_state`)
        live_plain = plain and current is not None and not isinstance(current, (dict, list, tuple))
        live_plain = live_plain or (isinstance(current, dict) and saved_as_app_state(src, child))  # a nested dict
        if isinstance(current, _core.Component) or live_plain:
            restore_tree(
                src,
                current,
                child,
                custom_objects=None,
                exclude=_core.nested(exclude, attr_path),
                exact_match=exact_match,
                set_data=set_data,
                modes=modes,
            )
            child_init = _format.join(child, _format.INIT)
            if modes and src.has(child_init):
                record = src.read_json(child_init)
                if isinstance(record, dict) and "modes" in record:
                    _core.apply_modes(current, record["modes"], f"archive `{src.name}`, member `{child_init}`")
        elif plain and isinstance(holder, dict) and saved_as_app_state(src, child):
            problem = ParameterMismatchError(  # a nested dict of stateful objects (`{"models": {...}}`)
                f"the app state has no dict at `{attr_path}` to restore this folder's state dicts into.",
                archive=src.name,
                member=child,
                hint=f"Pass the dict of objects it was saved from under that key, `exclude=[{attr_path!r}]` to leave "
                "it out, or `exact_match=False` to restore the entries that match.",
            )
            if exact_match:
                raise problem
            src.skip(child, None, None, problem)
        elif plain and handler_for(src, child, None) is None:
            raise ParameterMismatchError(
                f"component `{child}` was saved from a plain object (it has no init.json, so it cannot be built), "
                f"and {type(obj).__name__} has none at `{attr_path}` to restore it into.",
                archive=src.name,
                hint="Create that object in the constructor, or make its class a zipsave.Saveable.",
            )
        else:
            built = build(
                src,
                child,
                cls=None,
                custom_objects=None,
                exclude=_core.nested(exclude, attr_path),
                overrides={},
                exact_match=exact_match,
            )
            if isinstance(holder, dict):
                holder[last] = built
            elif isinstance(holder, list) and (index := index_of(last)) is not None and index <= len(holder):
                holder[index : index + 1] = [built]  # replaces, or appends at the end
            elif isinstance(holder, tuple):
                raise ParameterMismatchError(
                    f"component `{child}` belongs at index {last} of the tuple `{parent}`, which has "
                    f"{len(holder)} items and cannot grow.",
                    archive=src.name,
                    hint="Create it in the constructor, or hold the components in a list.",
                )
            else:
                _core.check_data_key(holder, last, **where)
                setattr(holder, last, built)
    if exact_match and not is_dict:
        _check_no_missing_components(src, obj, folder, exclude, live)


def _own(holder: Any, name: str, path: str, where: dict) -> Any:
    """``holder``'s own state called ``name`` (a component folder's name), ``None`` if it has none."""
    if isinstance(holder, dict):
        return holder.get(name)
    try:
        return _core.resolve(holder, name, **where)
    except AttributeError:
        return None


def _check_no_missing_components(
    src: LoadSession, obj: Any, folder: str, exclude: list[str], live: Parts | None
) -> None:
    """Raise when ``obj`` holds a component (a sub-model, a plain object holding modules) that
    the archive has no folder for and that the caller did not ``exclude``: it was left out of
    the save, and the object would keep its constructor's state for it without a word."""
    if any(h.claims(obj) for h in _core.handlers(live=True)):
        return  # SB3 models and the like: their handler knows what they hold
    if live is None:  # not collected for the state-dict check (SB3's hooks on a Saveable)
        try:
            live = _core.collect(obj, None, None)
        except ZipsaveError:
            return
    prefix = f"{folder}/" if folder else ""
    present = {child[len(prefix) :] for child in src.child_components(folder)}
    missing = [
        name for name, _ in live.components if name not in present and not (exclude and _core.matches(name, exclude))
    ]
    data_member = _format.join(folder, _format.DATA)
    if missing and src.has(data_member):
        # An archive that kept the attribute as a value (older archives pickled some in `data`)
        # restores it from there, or skips it with a warning of its own.
        raw = src.source.read_json(data_member, verify=False)
        in_data = set(raw) if isinstance(raw, dict) else set()
        missing = [name for name in missing if name.split("/")[0] not in in_data]
    if missing:
        raise ParameterMismatchError(
            f"{type(obj).__name__} holds the component{'s' if len(missing) > 1 else ''} "
            f"{', '.join(f'`{n}`' for n in missing)}, but the archive has no folder for "
            f"{'them' if len(missing) > 1 else 'it'}: left out of the save, so "
            f"{'they' if len(missing) > 1 else 'it'} would keep the constructor's state.",
            archive=src.name,
            member=folder or None,
            hint=f"If it was saved with `exclude=`, pass the same here (`exclude={missing!r}`) to keep the "
            "constructor's state on purpose; or pass `exact_match=False`.",
        )
