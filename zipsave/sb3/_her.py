"""SB3's ``HerReplayBuffer`` in the replay-buffer extra: its sampling settings, its episode
bookkeeping and its ``infos`` (as stacked arrays, no pickle), and ending an unfinished episode
when a resumed run resets the environments."""

from __future__ import annotations

import collections
import math
from typing import Any

import numpy as np

from .._bounds import alloc_budget
from .._invariants import MAX_TREE_DEPTH
from .._printable import shown
from ..exceptions import ArchiveLimitError, DecodeError, EncodeError
from ._same import same

__all__ = [
    "HER_ARRAYS",
    "bookkeeping_problem",
    "check_her",
    "her_settings_problem",
    "end_unfinished_episodes",
    "her_state",
    "is_her",
    "settings_note",
]

#: The episode bookkeeping HER samples goals from; a saved HER buffer must hold all of it.
HER_ARRAYS = ("ep_start", "ep_length", "_current_ep_start")
_SETTINGS = ("n_sampled_goal", "goal_selection_strategy", "her_ratio", "copy_info_dict")
#: Leaves an ``infos`` dict may hold, and how each comes back: arrays and numpy scalars keep
#: their dtype, Python numbers stay Python numbers.
_ARRAY_KINDS = ("ndarray", "numpy", "bool", "int", "float")
_KINDS = (*_ARRAY_KINDS, "str", "none", "empty")
_PYTHON_DTYPE_KINDS = {"bool": "b", "int": "i", "float": "f"}
_INFOS_FIELDS = {"layout": np.ndarray, "layouts": list, "columns": list}
#: What one key of a rebuilt ``infos`` dict takes at least (a dict slot: hash, key, value).
_ENTRY_BYTES = 24


def is_her(buffer: Any) -> bool:
    """True for SB3's ``HerReplayBuffer`` and its subclasses, found without importing SB3."""
    return any(
        c.__name__ == "HerReplayBuffer" and c.__module__.startswith("stable_baselines3.") for c in type(buffer).__mro__
    )


# -- saving --------------------------------------------------------------------------------
def her_state(buffer: Any) -> dict[str, Any]:
    """The entries a HER buffer adds to the replay-buffer component: ``her`` (settings, plain
    values) and, with ``copy_info_dict=True``, ``infos`` (stacked arrays). Its arrays
    (``ep_start``, ``ep_length``, ``_current_ep_start``) are collected with the others."""
    out: dict[str, Any] = {"her": _settings(buffer)}
    if buffer.copy_info_dict:  # otherwise SB3 never writes them: every cell is still `{}`
        filled = buffer.buffer_size if buffer.full else buffer.pos
        out["infos"] = _encode_infos(buffer.infos[:filled].reshape(-1))
    return out


def _encode_infos(cells: np.ndarray) -> dict[str, Any]:
    """``infos`` of the filled rows: one column per (key path, kind, dtype, shape) with its
    values stacked into one array, and per cell the layout (which columns, in its key order).
    ``ordered`` lists the depths along the path whose mapping is an ``OrderedDict`` (SB3's
    ``terminal_observation`` of a Dict space), so each comes back as the type it was."""
    columns: dict[tuple, dict[str, Any]] = {}
    numbers: dict[tuple, int] = {}
    layouts: dict[tuple, int] = {}
    layout = np.empty(len(cells), dtype=np.int64)
    for at, info in enumerate(cells):
        if not isinstance(info, dict):
            raise EncodeError(
                f"replay buffer `infos` cell {at} holds a {type(info).__name__}, expected a dict.", key="replay_buffer"
            )
        order = []
        for path, leaf, ordered in _leaves(info, (), ()):
            kind, value, signature = _leaf(path, leaf)
            if kind == "empty" and type(leaf) is collections.OrderedDict:
                ordered += (len(path),)
            name = (path, kind, ordered, *signature)
            if name not in columns:
                numbers[name] = len(columns)
                columns[name] = {"path": list(path), "kind": kind, "values": []}
                if ordered:
                    columns[name]["ordered"] = list(ordered)
            columns[name]["values"].append(value)
            order.append(numbers[name])
        layout[at] = layouts.setdefault(tuple(order), len(layouts))
    out = list(columns.values())
    for column in out:
        if column["kind"] in _ARRAY_KINDS:
            column["values"] = np.stack([np.asarray(v) for v in column["values"]])
        elif column["kind"] != "str":
            column["values"] = len(column["values"])
    return {"layout": layout, "layouts": [list(order) for order in layouts], "columns": out}


def _leaves(info: dict, path: tuple, ordered: tuple) -> Any:
    if not info and path:
        yield path, info, ordered
        return
    if type(info) is collections.OrderedDict:
        ordered += (len(path),)
    for key, value in info.items():
        if not isinstance(key, str):
            raise EncodeError(
                f"replay buffer `infos` key {'.'.join(path + (repr(key),))} is not a string.",
                key="replay_buffer",
                hint="Use string keys in the environment's info dicts, or `copy_info_dict=False`.",
            )
        if isinstance(value, dict):
            yield from _leaves(value, path + (key,), ordered)
        else:
            yield path + (key,), value, ordered


def _leaf(path: tuple, value: Any) -> tuple[str, Any, tuple]:
    """The kind of one ``infos`` value, the value to stack, and what else must match to share
    a column (dtype, shape)."""
    if isinstance(value, dict):
        return "empty", None, ()
    if value is None:
        return "none", None, ()
    if isinstance(value, str):
        return "str", value, ()
    if type(value) in (bool, float) or (type(value) is int and -(2**63) <= value < 2**63):
        return type(value).__name__, value, ()
    if isinstance(value, (np.ndarray, np.generic)) and not value.dtype.hasobject:
        kind = "ndarray" if isinstance(value, np.ndarray) else "numpy"
        return kind, value, (value.dtype.str, value.shape)
    raise EncodeError(
        f"replay buffer `infos` key `{'.'.join(path)}` holds a {type(value).__name__}; zipsave stores numbers, "
        "strings, None, numpy arrays and dicts of them there, without pickle.",
        key="replay_buffer",
        hint="Put only those in the environment's info dicts, or train with `copy_info_dict=False` "
        "(then HER does not keep them).",
    )


# -- loading -------------------------------------------------------------------------------
def check_her(
    buffer: Any, state: dict[str, Any], arrays: dict[str, Any], *, nbytes: int = 0, limits: Any = None
) -> Any:
    """Check the HER entries of a decoded replay-buffer component against ``buffer``; returns
    the ``infos`` to set (``None``: keep the fresh ``{}`` cells). Nothing is changed here. The
    ``infos`` rebuilt may take what :func:`~zipsave._bounds.alloc_budget` allows an archive of
    ``nbytes`` (under ``limits``)."""
    missing = [name for name in HER_ARRAYS if name not in arrays]
    if missing:
        raise DecodeError(f"holds a HerReplayBuffer without its episode bookkeeping {missing}.")
    if not isinstance(state.get("her"), dict):
        raise DecodeError(
            f"holds a HerReplayBuffer without its `her` settings (found {type(state.get('her')).__name__})."
        )
    if "infos" not in state:
        return None
    filled = buffer.buffer_size if state.get("full") else state.get("pos")
    return _decode_infos(state["infos"], int(filled or 0), buffer.n_envs, alloc_budget(nbytes, limits))


def her_settings_problem(state: dict[str, Any]) -> tuple[str, str] | None:
    """The setting, and what is wrong with a pickled HER buffer's sampling settings, or ``None``:
    SB3 keeps a ``GoalSelectionStrategy``, ``n_sampled_goal`` a finite number of at least 0 and
    ``her_ratio = 1 - 1 / (n_sampled_goal + 1)`` (``sample()`` takes ``int(her_ratio * batch_size)``)."""
    from stable_baselines3.her.goal_selection_strategy import GoalSelectionStrategy

    strategy, goals, ratio = (state.get(k) for k in ("goal_selection_strategy", "n_sampled_goal", "her_ratio"))
    if type(strategy) is not GoalSelectionStrategy:
        return (
            "goal_selection_strategy",
            f"`goal_selection_strategy` is {shown(strategy)}, where SB3 keeps a GoalSelectionStrategy",
        )
    if not 0 <= _real(goals) < math.inf:  # NaN and what is no number: never
        return "n_sampled_goal", f"`n_sampled_goal` is {shown(goals)}, where SB3 keeps a finite number of at least 0"
    if not 0 <= _real(ratio) <= 1:
        return "her_ratio", f"`her_ratio` is {shown(ratio)}, where SB3 keeps a number from 0 to 1"
    return None


def _real(value: Any) -> float:
    """``value`` as a float where it is a real number (not a bool) a float holds, else NaN."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.nan


def bookkeeping_problem(size: int, n_envs: int, arrays: dict[str, Any]) -> tuple[str, str] | None:
    """The array, and what is wrong with a HER buffer's episode bookkeeping (``ep_start``, ``ep_length`` of
    shape ``(size, n_envs)``, ``_current_ep_start`` of ``(n_envs,)``), or ``None``. SB3 keeps
    every start in ``0..size-1`` and every length in ``0..size``, and a transition it may sample
    (length > 0) lies inside its episode: ``(row - ep_start) % size < ep_length``. A pickle or an
    archive sets them as they are: ``_current_ep_start=-10**9`` made ending the unfinished
    episode (at load, or SB3's ``truncate_last_trajectory``) allocate 7.5 GiB, and a start or
    length out of step with its row raised ``low >= high`` at the first ``sample()``."""
    bounds: dict[str, tuple[tuple[int, ...], int]] = {
        "ep_start": ((size, n_envs), size - 1),
        "ep_length": ((size, n_envs), size),
        "_current_ep_start": ((n_envs,), size - 1),
    }
    for name, (shape, top) in bounds.items():
        value = arrays.get(name)
        if not (isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.shape == shape):
            found = f"{value.dtype}{list(value.shape)}" if isinstance(value, np.ndarray) else type(value).__name__
            return name, f"`{name}` is {found}, where SB3 keeps integers of shape {shape}"
        outside = (value < 0) | (value > top)
        if outside.any():
            at = tuple(int(i) for i in np.argwhere(outside)[0])
            return name, f"`{name}` holds {shown(int(value[at]))} at {list(at)}, where SB3 keeps 0..{top}"
    start, length = arrays["ep_start"].astype(np.int64), arrays["ep_length"].astype(np.int64)
    outside = (length > 0) & ((np.arange(size)[:, None] - start) % size >= length)
    if outside.any():
        row, env = (int(i) for i in np.argwhere(outside)[0])
        return "ep_length", (
            f"row {row} (env {env}) lies outside its episode (ep_start={int(start[row, env])}, "
            f"ep_length={int(length[row, env])}), where SB3 keeps (row - ep_start) % buffer_size < ep_length"
        )
    return None


def _decode_infos(saved: Any, rows: int, n_envs: int, budget: int) -> np.ndarray:
    """The ``infos`` cells ``saved`` describes. What they hold is counted before one is built:
    a column of kind ``none`` or ``empty`` holds no byte per value, and its every key in every
    cell, at every level of its path, is a dict slot: 4 000 such columns in 2 000 cells (35 KB
    of archive) built 8 million, and a path of 5 000 keys nested each cell's dict past what
    SB3's ``copy.deepcopy`` of a sampled batch can walk (``RecursionError`` at the first
    ``learn``). A path nests at most :data:`~zipsave._invariants.MAX_TREE_DEPTH` levels, and the
    slots of all cells take at most ``budget`` bytes."""
    cells = rows * n_envs
    if not isinstance(saved, dict) or not all(isinstance(saved.get(k), t) for k, t in _INFOS_FIELDS.items()):
        found = sorted(saved) if isinstance(saved, dict) else type(saved).__name__
        raise DecodeError(f"holds `infos` with {found}, expected `layout` (an array), `layouts` and `columns` (lists).")
    layout, layouts, columns = saved["layout"], saved["layouts"], saved["columns"]
    if (
        layout.shape != (cells,)
        or layout.dtype.kind not in "iu"
        or (cells and not 0 <= layout.min() <= layout.max() < len(layouts))
    ):
        raise DecodeError(
            f"`infos.layout` is {layout.dtype}{list(layout.shape)} naming layouts outside 0..{len(layouts) - 1}, "
            f"expected one per filled cell ({cells})."
        )
    if not all(isinstance(o, list) and all(type(c) is int and 0 <= c < len(columns) for c in o) for o in layouts):
        raise DecodeError(f"`infos.layouts` must list column numbers 0..{len(columns) - 1}.")
    uses = np.zeros(len(columns), dtype=np.int64)
    for number, count in zip(*np.unique(layout, return_counts=True)):
        for c in layouts[number]:
            uses[c] += count
    checked = [_checked_column(i, column, int(uses[i])) for i, column in enumerate(columns)]
    slots = sum(int(uses[i]) * len(column[0]) for i, column in enumerate(checked)) * _ENTRY_BYTES
    if slots > budget:
        raise ArchiveLimitError(
            f"holds `infos` whose {len(checked)} columns put {slots // _ENTRY_BYTES} keys in {cells} cells "
            f"({slots} bytes at least), more than the {budget} an archive of its size may ask for "
            "(`Limits.alloc_floor` plus `Limits.alloc_ratio` times its bytes).",
            key="infos",
            hint="If you trust the archive, raise them: `zipsave.load(..., limits=zipsave.Limits(alloc_ratio=...))`.",
        )
    taken = [0] * len(columns)
    out = np.empty((rows, n_envs), dtype=object)
    flat = out.reshape(-1)
    for at, number in enumerate(layout.tolist()):
        info: dict[str, Any] = {}
        for c in layouts[number]:
            path, kind, values, ordered = checked[c]
            if 0 in ordered and type(info) is not collections.OrderedDict:
                info = collections.OrderedDict(info)
            target = info
            for depth, key in enumerate(path[:-1], 1):
                target = target.setdefault(key, collections.OrderedDict() if depth in ordered else {})
                if not isinstance(target, dict):
                    break
            if not isinstance(target, dict) or path[-1] in target:
                raise DecodeError(f"`infos` layout {number} puts two values at `{'.'.join(path)}`.")
            value = _value(kind, values, taken[c])
            if kind == "empty" and len(path) in ordered:
                value = collections.OrderedDict()
            target[path[-1]] = value
            taken[c] += 1
        flat[at] = info
    return out


def _checked_column(i: int, column: Any, count: int) -> tuple[list[str], str, Any, list[int]]:
    if not isinstance(column, dict):
        raise DecodeError(f"`infos` column {i} is a {type(column).__name__}, expected a dict.")
    path: Any = column.get("path")
    kind: Any = column.get("kind")
    values: Any = column.get("values")
    ordered: Any = column.get("ordered") or []
    if (
        not (isinstance(path, list) and 0 < len(path) <= MAX_TREE_DEPTH and all(isinstance(p, str) for p in path))
        or kind not in _KINDS
    ):
        raise DecodeError(
            f"`infos` column {i} has path {shown(path)} and kind {shown(kind)}; expected 1 to {MAX_TREE_DEPTH} key "
            f"names and one of {list(_KINDS)}."
        )
    if not (isinstance(ordered, list) and all(type(d) is int and 0 <= d <= len(path) for d in ordered)):
        raise DecodeError(
            f"`infos` column `{'.'.join(path)}` has ordered={shown(ordered)}, expected depths 0..{len(path)}."
        )
    if kind in _ARRAY_KINDS:
        ok = isinstance(values, np.ndarray) and values.shape[:1] == (count,) and not values.dtype.hasobject
        if ok and kind != "ndarray":  # one scalar per cell; Python numbers of the matching kind
            ok = values.ndim == 1 and (kind == "numpy" or values.dtype.kind == _PYTHON_DTYPE_KINDS[kind])
    elif kind == "str":
        ok = isinstance(values, list) and len(values) == count and all(isinstance(v, str) for v in values)
    else:
        ok = values == count and type(values) is int
    if not ok:
        raise DecodeError(f"`infos` column `{'.'.join(path)}` does not hold the {count} {kind} values its layouts use.")
    return path, kind, values, ordered


def _value(kind: str, values: Any, j: int) -> Any:
    if kind == "ndarray":
        return values[j].copy()
    if kind == "numpy":
        return values[j]  # a numpy scalar of the saved dtype
    if kind in ("bool", "int", "float"):
        return values[j].item()
    if kind == "str":
        return values[j]
    return {} if kind == "empty" else None


def settings_note(buffer: Any, state: dict[str, Any]) -> str | None:
    """Say so when the model's HER settings differ from the saved ones: the model keeps its own
    (they come from its ``replay_buffer_kwargs``), the transitions are the saved ones."""
    saved = state.get("her") or {}
    current = _settings(buffer)
    differ = sorted(k for k in _SETTINGS if k in saved and not same(saved[k], current[k]))
    if not differ:
        return None
    pairs = ", ".join(f"{k}={shown(saved[k])} saved, {shown(current[k])} used" for k in differ)
    return f"the HerReplayBuffer keeps the model's settings ({pairs})."


def _settings(buffer: Any) -> dict[str, Any]:
    strategy = buffer.goal_selection_strategy
    return {
        "n_sampled_goal": int(buffer.n_sampled_goal),
        "goal_selection_strategy": str(getattr(strategy, "name", strategy)).lower(),
        "her_ratio": float(buffer.her_ratio),
        "copy_info_dict": bool(buffer.copy_info_dict),
    }


def end_unfinished_episodes(model: Any) -> bool:
    """What SB3's ``load_replay_buffer(truncate_last_traj=True)`` does, for a run that resets
    its environments on resume: the episode that was under way is marked done (a time-out,
    so it still bootstraps) and becomes sampleable, and a new one starts. Returns whether an
    episode was ended; a buffer other than HER is left alone."""
    buffer = getattr(model, "replay_buffer", None)
    if buffer is None or not is_her(buffer) or not (buffer._current_ep_start != buffer.pos).any():
        return False
    # SB3's own `truncate_last_trajectory()`, without its warning (which names its own
    # `truncate_last_trajectory=False`; zipsave says it in the report): no filter is touched
    for env_idx in np.where(buffer._current_ep_start != buffer.pos)[0]:
        buffer.dones[buffer.pos - 1, env_idx] = True  # the episode under way ends here
        buffer._compute_episode_length(int(env_idx))  # sampleable, and the next one starts
        if buffer.handle_timeout_termination:
            buffer.timeouts[buffer.pos - 1, env_idx] = True  # not a real time-out: it still bootstraps
    return True
