"""What an archive folder is, before anything is built: a component or a dict of them, the
handler that builds it (named by its ``init.json`` or recognising it), and app-state folders
read as dicts. A plain load needs only this; :mod:`._build` constructs objects."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

# _core: build (a folder holds a Saveable), the exclude globs, and the registry (a folder no dict was saved to)
from .. import _core, _format
from .._archive import data_bytes, member_names, saved_as_app_state
from ..exceptions import ArchiveFormatError, MissingDependencyError, ZipsaveError
from ._session import LoadSession

if TYPE_CHECKING:
    from .._registry import Handler

__all__ = ["check_component", "handler_for", "load_app_state", "no_model_error", "recognising_handler"]


def check_component(src: LoadSession, folder: str) -> None:
    """``folder`` must be a component (it has ``data``) or a dict of components."""
    if folder and not src.has(_format.join(folder, _format.DATA)) and not src.child_components(folder):
        member = folder + _format.PTH_SUFFIX
        raise ArchiveFormatError(
            f"has no component `{folder}`; components: {sorted(src.source.components())}.",
            archive=src.name,
            hint=f"`{member}` is a state dict, not a component: `zipsave.load_archive(path)[1][{folder!r}]` reads it, "
            f"`zipsave.read(path, '{folder}/<key>')` one of its tensors."
            if src.has(member)
            else None,
        )


def handler_for(src: LoadSession, folder: str, cls: Any, *, record: Any = None) -> Handler | None:
    """The registered handler that builds ``folder``: the one its ``init.json`` names, else one
    that builds ``cls``, else (no ``cls``, no ``init.json``) one that recognises the folder."""
    init_member = _format.join(folder, _format.INIT)
    if src.has(init_member):
        if record is None:  # the caller had not read the folder's init.json yet
            record = src.read_json(init_member)
        name = record.get("handler") if isinstance(record, dict) else None
        if name is None:
            return None
        handler = _core.by_name(str(name))
        if handler is None:
            raise MissingDependencyError(
                f"was written by the zipsave integration `{name}`, which is not installed.",
                archive=src.name,
                member=init_member,
                # only zipsave's own integrations have a command to give: any other name is the
                # archive's text, never handed back as something to paste into a shell
                hint=f"Install it with `pip install zipsave[{name}]`."
                if name in _core.ENTRY_HINTS
                else "Install the package that provides a zipsave handler of that name.",
            )
        return handler
    if cls is not None:
        return next((h for h in _core.handlers(live=True) if h.builds(cls)), None)
    return recognising_handler(src, folder)


def recognising_handler(src: LoadSession, folder: str) -> Handler | None:
    """The registered handler that recognises ``folder`` by its members or ``data`` keys; none
    for a folder the manifest lists as saved from a dict."""
    if saved_as_app_state(src, folder):
        return None
    asked = _core.handlers(members=member_names(src, folder), data=lambda: data_bytes(src, folder))
    return next((h for h in asked if h.recognises(src, folder)), None)


def load_app_state(src: LoadSession, folder: str, *, custom_objects: dict | None, exclude: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = dict(src.decode_data(folder, custom_objects=custom_objects, exclude=exclude) or {})
    prefix = f"{folder}/" if folder else ""
    placed: list[tuple[int, str]] = []  # state dicts given as values, and their places among the keys
    for name in src.source.members_in(folder):
        if not name.endswith(_format.PTH_SUFFIX):
            continue
        key = name[len(prefix) : -len(_format.PTH_SUFFIX)]
        if name[len(prefix) :] == _format.PYTORCH_VARIABLES:
            _add_variables(src, name, out, exclude)
            continue
        if exclude and _core.matches(key, exclude):
            continue
        if name in src.reader.state_dict_values and key not in out:
            placed.append((src.reader.state_dict_values[name], key))
            if custom_objects and key in custom_objects:
                out[key] = custom_objects[key]  # replaced unread, as the `data` key it was
                continue
        try:
            out[key], _ = src.load_tensors(name)
        except ZipsaveError as err:
            src.skip(name, None, None, err)
    if placed:
        out = _in_place_order(out, placed)
    for child in src.child_components(folder):
        key = child[len(prefix) :]
        if "/" in key or (exclude and _core.matches(key, exclude)):
            continue
        if src.has(_format.join(child, _format.INIT)):  # a Saveable held by the app state
            out[key] = _core.build(
                src, child, cls=None, custom_objects=None, exclude=_core.nested(exclude, key), overrides={}
            )
        else:  # a plain object's folder: its values and state dicts, as a dict
            out[key] = load_app_state(src, child, custom_objects=None, exclude=_core.nested(exclude, key))
    return out


def _in_place_order(out: dict[str, Any], placed: list[tuple[int, str]]) -> dict[str, Any]:
    """``out`` with the keys of ``placed`` at their places, the others in their order (linear
    in the keys, whatever places a manifest gives)."""
    moved = {key for _, key in placed}
    others = iter([k for k in out if k not in moved])
    keys: list[str] = []
    for place, key in sorted(placed):
        keys.extend(itertools.islice(others, max(0, place - len(keys))))
        if key in out:  # not skipped as broken
            keys.append(key)
    keys.extend(others)
    return {k: out[k] for k in keys}


def _add_variables(src: LoadSession, member: str, out: dict[str, Any], exclude: list[str]) -> None:
    """An object's loose tensors (its ``pytorch_variables.pth``) are its values too: without
    them a module or an object saved on its own would come back without its parameters."""
    try:
        variables, _ = src.load_tensors(member)
    except ZipsaveError as err:
        src.skip(member, None, None, err)
        return
    for key, value in (variables if isinstance(variables, dict) else {}).items():
        if isinstance(key, str) and key not in out and not (exclude and _core.matches(key, exclude)):
            out[key] = value


def no_model_error(src: LoadSession, hint: str) -> ArchiveFormatError:
    """The error for an archive without a ``data`` member. ``hint`` fits one that holds
    ``.pth`` members; a ``torch.save`` file and a zip of other files are named for what they are,
    since neither holds anything a zipsave function reads."""
    names = src.source.names()
    what = "has no `data` member, so it holds no model"
    if any(n.endswith(_format.PTH_SUFFIX) for n in names):
        return ArchiveFormatError(f"{what} (not a zipsave or SB3 model archive?).", archive=src.name, hint=hint)
    pickle = next((n for n in names if n == "data.pkl" or n.endswith("/data.pkl")), None)
    if pickle is not None and _sb3_policy_pickle(src, pickle):
        return ArchiveFormatError(
            f"{what}: it is a policy saved by SB3's `policy.save` (a `torch.save` file of its constructor "
            "arguments and weights), not a model archive.",
            archive=src.name,
            hint="Load it with its policy class, the `MlpPolicy` (or other) of its algorithm: `MlpPolicy.load(path)` "
            "under `zipsave.sb3.install()`, which reads it without running its pickle; a model is loaded from "
            "what `model.save` wrote.",
        )
    if pickle is not None:
        return ArchiveFormatError(
            f"{what}: it is a `torch.save` file (it holds `{pickle}`), not a model archive.",
            archive=src.name,
            hint="Read it with `torch.load(path, weights_only=True)`.",
        )
    listed = ", ".join(f"`{n}`" for n in sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
    return ArchiveFormatError(
        f"{what}: it is a zip file of {len(names)} other member(s) ({listed or 'none'}), not a model archive.",
        archive=src.name,
        hint="Check the path.",
    )


def _sb3_policy_pickle(src: LoadSession, member: str) -> bool:
    """Whether ``member``, a ``torch.save`` pickle, is SB3's ``policy.save``: the dict of its
    ``state_dict`` and its constructor's ``data``, which names SB3's classes (read, not run)."""
    try:
        raw = src.reader.read(member, limit=1 << 20, verify=False)
    except Exception:  # noqa: BLE001 - too large or unreadable: not named as one
        return False
    return b"state_dict" in raw and (b"stable_baselines3" in raw or b"sb3_contrib" in raw)
