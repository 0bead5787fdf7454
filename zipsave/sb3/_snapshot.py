"""Which rows of an SB3 replay buffer a background save must copy again: those written since
its last snapshot, known from the buffer's ``pos``/``full`` and the model's ``num_timesteps``
(the shadow itself is kept by ``zipsave/_api/_shadow.py``); and the write barrier that lets the
shadow be filled in the background: the rows a buffer method is about to write are reported
before it writes them."""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["replay_snapshot"]

#: Arrays smaller than this are copied whole at each save: cheaper than tracking their rows.
_ROW_MIN_BYTES = 1 << 20

#: Bookkeeping that ``HerReplayBuffer.add`` rewrites for past rows (an episode's length is
#: written when it ends, and zeroed for an old episode being overwritten).
_REWRITTEN = frozenset({"ep_start", "ep_length", "_current_ep_start"})

_CLASSES = ("ReplayBuffer", "DictReplayBuffer", "NStepReplayBuffer", "HerReplayBuffer")


def _rows_added(buffer: Any) -> tuple[int, ...]:
    pos = int(buffer.pos)
    return (pos, (pos + 1) % buffer.buffer_size) if buffer.optimize_memory_usage else (pos,)


def _row_before(buffer: Any) -> tuple[int, ...]:
    return ((int(buffer.pos) - 1) % buffer.buffer_size,)


#: The methods of SB3's buffers that write rows of their arrays, and the rows each call writes
#: (from the buffer as it is before the call). Everything else they write is bookkeeping that
#: is not row-indexed (HER's episode starts and lengths), copied whole at each save.
_WRITERS: dict[str, Callable[[Any], tuple[int, ...]]] = {
    "add": _rows_added,  # row `pos`; with `optimize_memory_usage` also the next observation
    "_get_samples": _row_before,  # NStepReplayBuffer flips `timeouts[pos - 1]` while it samples
    "truncate_last_trajectory": _row_before,  # HerReplayBuffer ends the last episode at `pos - 1`
}

_ABSENT = object()
_watch_lock = threading.Lock()
#: id(buffer) -> the functions told the rows a call is about to write (the buffer is kept alive
#: by its watch until it is removed, so the id is not reused meanwhile).
_watchers: dict[int, list[Callable[[tuple[int, ...] | None], None]]] = {}
#: class -> (watched buffers of it, {method: (the class's own attribute before, its guard)}).
_guarded: dict[type, tuple[int, dict[str, tuple[Any, Any]]]] = {}


def _guard(method: Callable[..., Any], rows: Callable[[Any], tuple[int, ...]]) -> Callable[..., Any]:
    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        watchers = _watchers.get(id(self))
        if watchers:
            try:
                written: tuple[int, ...] | None = rows(self)
            except Exception:  # noqa: BLE001 - not known: the watcher copies all it has left first
                written = None
            for before_write in list(watchers):
                before_write(written)
        return method(self, *args, **kwargs)

    return guarded


def _watch(buffer: Any, before_write: Callable[[tuple[int, ...] | None], None]) -> Callable[[], None]:
    """Call ``before_write(rows)`` before each call of ``buffer``'s writing methods writes
    ``rows`` (``None``: rows not known), until the returned function is called. The methods are wrapped on the class, not
    the instance (an instance attribute would be pickled with the buffer); calls on buffers not
    watched go straight through, and the class gets its own methods back when the last watch of
    its buffers ends."""
    cls = type(buffer)
    with _watch_lock:
        _watchers.setdefault(id(buffer), []).append(before_write)
        count, methods = _guarded.get(cls, (0, {}))
        if not count:
            methods = {}
            for name, rows in _WRITERS.items():
                method = getattr(cls, name, None)
                if callable(method):
                    guard = _guard(method, rows)
                    methods[name] = (cls.__dict__.get(name, _ABSENT), guard)
                    setattr(cls, name, guard)
        _guarded[cls] = (count + 1, methods)
    ended = threading.Event()

    def unwatch() -> None:
        with _watch_lock:
            if ended.is_set():
                return
            ended.set()
            watchers = _watchers[id(buffer)]
            watchers.remove(before_write)
            if not watchers:
                del _watchers[id(buffer)]
            count, methods = _guarded.pop(cls)
            if count > 1:
                _guarded[cls] = (count - 1, methods)
                return
            for name, (original, guard) in methods.items():
                if cls.__dict__.get(name) is not guard:
                    continue  # wrapped again by someone since: ours stays beneath, passing calls through
                if original is _ABSENT:
                    delattr(cls, name)
                else:
                    setattr(cls, name, original)

    return unwatch


def _sb3_classes() -> tuple[type, ...]:
    from stable_baselines3.common import buffers
    from stable_baselines3.her import HerReplayBuffer

    found = [getattr(buffers, name, None) for name in _CLASSES] + [HerReplayBuffer]
    return tuple(cls for cls in found if isinstance(cls, type))


class ReplaySnapshot:
    """The snapshot source (``_api/_shadow.py``) of one SB3 replay buffer."""

    def __init__(self, model: Any, buffer: Any) -> None:
        self.owner = buffer
        self._model = weakref.ref(model)
        self._rows = {
            id(arr)
            for name, value in vars(buffer).items()
            if name not in _REWRITTEN
            for arr in (value.values() if isinstance(value, dict) else (value,))
            if isinstance(arr, np.ndarray)
            and arr.ndim
            and arr.shape[0] == buffer.buffer_size
            and arr.nbytes >= _ROW_MIN_BYTES
        }

    def row_indexed(self, arr: np.ndarray) -> bool:
        return id(arr) in self._rows

    def watch(self, before_write: Callable[[tuple[int, ...] | None], None]) -> Callable[[], None]:
        """Report the rows the buffer's own methods write, before they write them (see
        ``_WRITERS``), until the returned function is called."""
        return _watch(self.owner, before_write)

    def state(self) -> tuple[Any, ...]:
        buffer, model = self.owner, self._model()
        steps = getattr(model, "num_timesteps", None)
        return (
            type(buffer),
            buffer.buffer_size,
            buffer.n_envs,
            bool(buffer.optimize_memory_usage),
            int(buffer.pos),
            bool(buffer.full),
            steps if type(steps) is int else None,
        )

    def dirty_rows(self, previous: tuple[Any, ...]) -> tuple[list[tuple[int, int]] | None, str]:
        """The row ranges ``add`` wrote since ``previous`` (each call writes row ``pos``,
        and with ``optimize_memory_usage`` the next observation into row ``pos + 1``)."""
        kind, size, n_envs, optimized, pos, full, steps = self.state()
        old_kind, old_size, old_envs, old_optimized, old_pos, old_full, old_steps = previous
        if (kind, size, n_envs, optimized) != (old_kind, old_size, old_envs, old_optimized):
            return None, "the buffer's class or settings changed"
        if steps is None or old_steps is None:
            return None, "the model has no integer `num_timesteps`"
        added, left = divmod(steps - old_steps, n_envs)
        if left or not 0 <= added < size:
            return None, f"num_timesteps moved by {steps - old_steps} with n_envs={n_envs} and buffer_size={size}"
        if pos != (old_pos + added) % size:
            return None, f"pos is {pos}, but {added} rows after pos {old_pos} it should be {(old_pos + added) % size}"
        if full != (old_full or old_pos + added >= size):
            return None, f"full is {full} after {added} rows from pos {old_pos} (full was {old_full})"
        if not added:
            # HER's `truncate_last_trajectory` ends the last episode without adding a row: it
            # writes `dones`/`timeouts` of the row before `pos` (which `added` rows would cover).
            last = (pos - 1) % size
            return ([(last, last + 1)] if pos or full else []), "no rows added"
        ranges = [(old_pos, min(old_pos + added, size))]
        if old_pos + added > size:
            ranges.append((0, old_pos + added - size))
        if optimized:  # the last `add` also wrote observations[pos]
            ranges.append((pos, pos + 1))
        return ranges, f"{added} rows added"


def replay_snapshot(model: Any, buffer: Any) -> ReplaySnapshot | None:
    """The incremental snapshot source of ``model``'s replay ``buffer``; ``None`` for a class
    other than SB3's own (a subclass may write rows elsewhere): it is copied whole each time."""
    return ReplaySnapshot(model, buffer) if type(buffer) in _sb3_classes() else None
