"""What a restore expects of the live object: an object holds the archive's state dicts (said
in the integration's words when it can tell what the archive holds instead); every stateful
object of an app-state dict has its state in the archive (unless ``exact_match=False``), and,
when strict, the archive's stateful entries are the dict's."""

from __future__ import annotations

from typing import Any

from .. import _core, _format  # _core: the exclude globs
from .._archive import saved_as_app_state
from ..exceptions import ParameterMismatchError
from ._parts import is_stateful
from ._session import LoadSession

__all__ = ["check_app_state", "check_live_entries", "check_state_names"]


def check_app_state(src: LoadSession, app: dict, folder: str, exclude: Any = None) -> None:
    """A strict restore into a dict: the archive's stateful entries are the dict's, less what
    ``exclude`` leaves out on purpose. A state dict saved as a value (``{"model":
    model.state_dict()}``, a ``.pth`` member the manifest lists) is a value, as it was in
    ``data`` before zipsave 0.2 wrote it so: neither side counts it."""
    prefix = f"{folder}/" if folder else ""
    saved = {
        n[len(prefix) : -len(_format.PTH_SUFFIX)]
        for n in src.source.members_in(folder)
        if n.endswith(_format.PTH_SUFFIX) and n not in src.reader.state_dict_values
    } - {_format.PYTORCH_VARIABLES[: -len(_format.PTH_SUFFIX)]}
    wanted = {k for k, v in app.items() if is_stateful(v)}
    if exclude:
        saved = {n for n in saved if not _core.matches(n, exclude)}
        wanted = {n for n in wanted if not _core.matches(n, exclude)}
    if saved != wanted:
        extra = sorted(saved - wanted)
        data_member = _format.join(folder, _format.DATA)
        raw = src.read_json(data_member) if src.has(data_member) else None
        as_values = sorted(
            k
            for k in wanted - saved
            if prefix + k + _format.PTH_SUFFIX in src.reader.state_dict_values or (isinstance(raw, dict) and k in raw)
        )
        values = (
            f" The archive holds {', '.join(f'`{k}`' for k in as_values)} as state dicts saved as values "
            "(`{'model': model.state_dict()}`), which a strict restore does not count as objects' state; "
            "a restore without `strict=True` loads them into the live objects."
            if as_values
            else ""
        )
        raise ParameterMismatchError(
            f"holds stateful entries {sorted(saved)}, but the app state has {sorted(wanted)}.{values}",
            archive=src.name,
            hint=f"Pass `exclude={extra}` to leave out the entries the app state does not hold, or "
            "`strict=False, exact_match=False` to restore the ones that match."
            if extra
            else "Pass `strict=False, exact_match=False` to restore the ones that match."
            if not as_values
            else None,
        )


def check_live_entries(src: LoadSession, app: dict, folder: str, saved: list[str], exclude: Any = None) -> None:
    """An exact restore into a dict: each stateful object the dict holds (a module, an optimizer,
    a scheduler) finds its state in the archive, as a ``.pth`` member (``saved``) or a component
    folder. Else it would keep the state it was built with, and the restore would return as if
    it had restored it (an archive of other keys, of a module saved alone). And each state dict
    the archive holds for an object finds that object's key. Both are checked before anything is
    set: a restore that fails leaves the dict as it was."""
    prefix = f"{folder}/" if folder else ""
    for name in saved:
        member = prefix + name + _format.PTH_SUFFIX
        excluded = exclude and _core.matches(name, exclude)
        if not excluded and name not in app and member not in src.reader.state_dict_values:
            raise ParameterMismatchError(
                f"the app state has no key `{name}` to restore this state dict into (its keys: {sorted(map(str, app))}).",
                archive=src.name,
                member=member,
                hint=f"Pass the object it was saved from under that key, `exclude=[{prefix + name!r}]` to leave it out, "
                "or `exact_match=False` to restore the entries that match.",
            )
    for child in src.child_components(folder):
        key = child[len(prefix) :]
        if key not in app and saved_as_app_state(src, child) and not (exclude and _core.matches(key, exclude)):
            raise ParameterMismatchError(
                f"the app state has no dict at `{prefix + key}` to restore this folder's state dicts into.",
                archive=src.name,
                member=child,
                hint=f"Pass the dict of objects it was saved from under that key, `exclude=[{prefix + key!r}]` to "
                "leave it out, or `exact_match=False` to restore the entries that match.",
            )
    data_member = _format.join(folder, _format.DATA)
    raw = src.read_json(data_member) if src.has(data_member) else None
    in_data = {k for k in (raw if isinstance(raw, dict) else ()) if is_stateful(app.get(k))}  # state dicts in `data`
    held = set(saved) | in_data | {child[len(prefix) :].partition("/")[0] for child in src.child_components(folder)}
    missing = sorted(
        str(k)
        for k, v in app.items()
        if is_stateful(v) and k not in held and not (exclude and _core.matches(k, exclude))
    )
    if missing:
        raise ParameterMismatchError(
            f"holds no state for {', '.join(f'`{k}`' for k in missing)} of the app state (its stateful entries: "
            f"{sorted(saved)}), so {'they' if len(missing) > 1 else 'it'} would keep the state "
            f"{'they were' if len(missing) > 1 else 'it was'} built with.",
            archive=src.name,
            member=folder or None,
            hint=(
                "It holds one object saved on its own: restore it into that object, `zipsave.restore(obj, path)`. "
                if not held and src.has(prefix + _format.PYTORCH_VARIABLES)
                else "Check the path and the dict's keys; "
            )
            + f"pass `exclude={[prefix + k for k in missing]}` to keep those objects as they are, "
            "or `exact_match=False` to restore the entries that match.",
        )


def check_state_names(
    src: LoadSession, obj: Any, folder: str, state_names: list[str], expected: list[str], kept: set[str]
) -> None:
    """An exact restore into ``obj``: the archive folder holds its state dicts (``expected``;
    ``kept``: the folder's ``state_names`` less what ``exclude`` leaves out), and the integration
    that claims ``obj`` does not say the folder holds another kind of object (a PPO's archive
    restored into an A2C has the same state dicts, and the A2C's first ``learn`` failed). The
    error names what the folder holds instead, and members the manifest lists but that are gone."""
    owner = next((h for h in _core.handlers(live=True) if h.claims(obj)), None)
    mismatch = owner.describe_mismatch(src, obj, folder) if owner is not None else None
    if mismatch is None and set(expected) == kept:
        return
    prefix = f"{folder}/" if folder else ""
    lost = sorted(
        n[len(prefix) : -len(_format.PTH_SUFFIX)]
        for n in src.reader.manifest or {}
        if n.startswith(prefix)
        and n.endswith(_format.PTH_SUFFIX)
        and n not in src.reader
        and "/" not in n[len(prefix) :]
    )
    gone = f" manifest.json lists {lost} too, missing from the archive (removed after saving?)." if lost else ""
    what, hint = mismatch or (
        None,
        "If it was saved with `exclude=`, pass the same `exclude=` here; else pass "
        "`exact_match=False` to load the ones that match.",
    )
    kind, names = type(obj).__name__, sorted(state_names)
    differ = f": its state dicts are {names}, the {kind}'s {sorted(expected)}" if set(expected) != kept else ""
    raise ParameterMismatchError(
        f"holds {what}, which cannot be restored into the {kind} given{differ}.{gone}"
        if what
        else f"holds state dicts {names}, but the object has {sorted(expected)}.{gone}",
        archive=src.name,
        member=folder or None,
        hint=hint,
    )
