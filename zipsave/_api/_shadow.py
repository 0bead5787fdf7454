"""Snapshots of large arrays for background saves: a shadow copy of a growing object's arrays,
filled by the save's writer thread behind a write barrier, so the call does not wait for the
copy. With ``incremental=True`` the shadow is kept between saves, so a later save copies only
the rows written since the last one; without it, the shadow is the save's own and goes once it
has written.

An integration opts a component in by putting a *source* in ``Parts.snapshot`` (SB3's replay
buffers: ``zipsave/sb3/_snapshot.py``). A source has

* ``owner``: the live object the shadow belongs to (weakly referenced: the shadow goes with it);
* ``state()``: its bookkeeping now (any comparable value, e.g. a position and a step counter);
* ``dirty_rows(previous_state)``: ``(ranges, reason)``, the ``[start, stop)`` row ranges
  written since ``previous_state``, or ``None`` and why they cannot be known;
* ``row_indexed(array)``: whether the array's rows change only where ``dirty_rows`` says
  (the others are copied whole each time, as bookkeeping rewritten for past rows must be);
* optionally ``watch(before_write)``: a write barrier; the owner reports the rows of its
  row-indexed arrays that it is about to write (``before_write(rows)``, ``None`` where not
  known) until the function returned is called.

A copy of many rows (a first snapshot, a full copy after a fallback, many new rows) from a
source that can be watched is not made in the calling thread: the shadow is handed to the
save's writer thread, which copies it chunk by chunk (``_Fill``) while training goes on; the
write barrier copies a chunk that is about to be written first, so the shadow holds exactly the
rows as they were at the call. Only the arrays that are not row-indexed (small) are copied at
once.

Whatever does not add up falls back to a full copy: an array replaced, moved or reshaped, no
known dirty rows, or a sample of rows outside them that differs between the live arrays and the
shadow. A writer holds the shadow until it has written; a save that finds it held waits for
that writer, so there is never more than the one shadow (the fresh copy it would make instead
is as large as the buffer, once per save that arrives while the disk is behind).
"""

from __future__ import annotations

import collections
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .._tensors import fresh_copy, fresh_empty, release_copies

__all__ = ["release_snapshots", "take"]

_log = logging.getLogger("zipsave")

#: Rows outside the dirty ranges compared between the live arrays and the shadow at each save.
SAMPLED_ROWS = 16
#: A copy of at least this many bytes of row-indexed arrays is made in the background (where
#: the source can be watched); a smaller one at once, in the calling thread (a few ms).
BACKGROUND_MIN_BYTES = 16 << 20
#: Rows of all the row-indexed arrays together copied in one step of a background copy: at
#: most what a write to a row not copied yet waits for.
CHUNK_BYTES = 4 << 20

_lock = threading.Lock()
_shadows: weakref.WeakKeyDictionary[Any, _Shadow] = weakref.WeakKeyDictionary()


class _Shadow:
    """One live object's shadow arrays and the state they match (``once``: one save's own
    copy, made as a first snapshot is and given back when that save has written)."""

    def __init__(self, once: bool = False) -> None:
        self.once = once
        self.busy = threading.Lock()  # held from the copy until the writer has written
        self.state: Any = None
        self.names: list[str] = []
        self.refs: list[weakref.ref] = []
        self.keys: list[tuple[Any, ...]] = []
        self.arrays: list[np.ndarray] = []
        self.fill: _Fill | None = None  # the rows still to copy, by the writer that holds it

    @property
    def nbytes(self) -> int:
        return sum(arr.nbytes for arr in self.arrays)

    def forget(self) -> None:
        self.state, self.names, self.refs, self.keys, self.arrays = None, [], [], [], []

    def let_go(self) -> None:
        """The writer is done with the shadow: a copy it never ran is given up (the shadow then
        matches nothing), and the next save may take it."""
        fill, self.fill = self.fill, None
        if fill is not None:
            fill.cancel()
        if self.once:
            self.forget()
        self.busy.release()

    def update(self, source: Any, arrays: list[tuple[str, np.ndarray]]) -> list[np.ndarray]:
        """Bring the shadow up to the live arrays (or hand the rows left to ``self.fill``);
        returns the shadow arrays."""
        state = source.state()
        live = [arr for _, arr in arrays]
        ranges: list[tuple[int, int]] | None = None
        reason: str | None = "a save without incremental=True" if self.once else "first snapshot"
        if self.state is not None:
            reason = self._arrays_changed(arrays)
            if reason is None:
                ranges, reason = source.dirty_rows(self.state)
            if ranges is not None:
                reason = self._sample_differs(source, live, ranges)
                if reason is not None:
                    ranges = None
        # Until the copy below has finished the shadow matches no state: an error midway leaves
        # it to be filled afresh by the next save (a background copy that fails forgets it).
        self.state = None
        self.fill = self._background(source, live, ranges)
        if self.fill is not None:
            _log.debug(
                "background save: %s snapshot of %s (%s, in the background: %d bytes)",
                "full" if ranges is None else "incremental",
                type(source.owner).__name__,
                reason if ranges is None else f"rows {ranges}",
                self.fill.nbytes,
            )
        elif ranges is None:
            self._copy_all(live)
            _log.debug(
                "background save: full snapshot of %s (%s, %d bytes)", type(source.owner).__name__, reason, self.nbytes
            )
        else:
            copied = self._copy_rows(source, live, ranges)
            _log.debug(
                "background save: incremental snapshot of %s (rows %s, %d bytes)",
                type(source.owner).__name__,
                ranges,
                copied,
            )
        self.state = state
        self.names = [name for name, _ in arrays]
        self.refs = [weakref.ref(arr) for arr in live]
        self.keys = [_key(arr) for arr in live]
        return self.arrays

    def _arrays_changed(self, arrays: list[tuple[str, np.ndarray]]) -> str | None:
        if [name for name, _ in arrays] != self.names or len(self.arrays) != len(arrays):
            return "the arrays are not those of the last snapshot"
        for (name, arr), ref, key in zip(arrays, self.refs, self.keys):
            if ref() is not arr or _key(arr) != key:
                return f"array `{name}` was replaced, moved or reshaped"
        return None

    def _sample_differs(self, source: Any, live: list[np.ndarray], ranges: list[tuple[int, int]]) -> str | None:
        """Compare a few rows outside ``ranges``: a buffer reset and refilled to the same
        position, or edited by hand, differs there from the shadow."""
        rng = np.random.default_rng()  # its own generator: the training's random state is left alone
        for index, arr in enumerate(live):
            if not source.row_indexed(arr) or arr.shape[0] == 0:
                continue
            candidates = rng.integers(0, arr.shape[0], 4 * SAMPLED_ROWS)
            rows = [r for r in candidates.tolist() if not any(a <= r < b for a, b in ranges)][:SAMPLED_ROWS]
            if rows and arr[rows].tobytes() != self.arrays[index][rows].tobytes():
                return f"a sampled row of array {index} outside the rows written since differs from the shadow"
        return None

    def _copy_all(self, live: list[np.ndarray]) -> None:
        if _fits(self.arrays, live):  # same memory again: no second shadow while the first is refilled
            for shadow, arr in zip(self.arrays, live):
                np.copyto(shadow, arr, casting="no")
        else:
            self.arrays = []  # drop the old shadow before allocating the new one
            self.arrays = [fresh_copy(arr) for arr in live]

    def _background(self, source: Any, live: list[np.ndarray], ranges: list[tuple[int, int]] | None) -> _Fill | None:
        """Copy what is not row-indexed now and hand the rows to a ``_Fill`` watching the
        source; ``None`` (nothing done) where the rows are few or the source cannot be watched."""
        watch = getattr(source, "watch", None)
        indexed = [index for index, arr in enumerate(live) if source.row_indexed(arr)]
        if watch is None or not indexed:
            return None
        n_rows = live[indexed[0]].shape[0]
        if n_rows == 0 or any(live[index].shape[0] != n_rows for index in indexed):
            return None
        row_bytes = sum(live[index].nbytes // n_rows for index in indexed)
        wanted = n_rows if ranges is None else sum(stop - start for start, stop in ranges)
        if wanted * row_bytes < BACKGROUND_MIN_BYTES:
            return None
        if ranges is None and not _fits(self.arrays, live):
            self.arrays = []  # drop the old shadow before allocating the new one
            self.arrays = [fresh_empty(arr) if index in indexed else fresh_copy(arr) for index, arr in enumerate(live)]
        else:
            for index, (shadow, arr) in enumerate(zip(self.arrays, live)):
                if index not in indexed:
                    np.copyto(shadow, arr, casting="no")
        step = max(1, CHUNK_BYTES // max(row_bytes, 1))
        if ranges is None:
            chunks = list(range(-(-n_rows // step)))
        else:
            chunks = sorted(
                {c for start, stop in ranges if stop > start for c in range(start // step, (stop - 1) // step + 1)}
            )
        fill = _Fill(self, [(live[index], self.arrays[index]) for index in indexed], step, chunks)
        fill.unwatch = watch(fill.before_write)
        return fill

    def _copy_rows(self, source: Any, live: list[np.ndarray], ranges: list[tuple[int, int]]) -> int:
        copied = 0
        for shadow, arr in zip(self.arrays, live):
            if source.row_indexed(arr):
                for start, stop in ranges:
                    shadow[start:stop] = arr[start:stop]
                    copied += arr[start:stop].nbytes
            else:
                np.copyto(shadow, arr, casting="no")
                copied += arr.nbytes
        return copied


class _Fill:
    """The chunks of a shadow's row-indexed arrays still to copy from the live arrays at the
    state of a save, while the owner goes on writing. ``run`` (the save's writer thread) copies
    them one by one; ``before_write`` (the owner's write barrier, in the training thread)
    copies a chunk about to be written first, or waits for the one ``run`` is copying. A chunk
    is copied once, before any write to it, so the shadow ends up exactly as the arrays were."""

    _TODO, _COPYING, _DONE = 0, 1, 2

    def __init__(self, shadow: _Shadow, pairs: list[tuple[np.ndarray, np.ndarray]], step: int, chunks: list[int]):
        self._shadow = shadow
        self._pairs = pairs  # (live, shadow) of each row-indexed array
        self._step = step  # rows per chunk
        self._n_rows = pairs[0][0].shape[0]
        self._states = bytearray([self._DONE]) * (-(-self._n_rows // step))
        for chunk in chunks:
            self._states[chunk] = self._TODO
        self._todo = collections.deque(chunks)
        self.nbytes = sum(min(step, self._n_rows - c * step) for c in chunks) * sum(
            live.nbytes // self._n_rows for live, _ in pairs
        )
        self._cond = threading.Condition()
        self._over = False
        self._error: BaseException | None = None
        self.unwatch: Callable[[], None] | None = None

    def before_write(self, rows: tuple[int, ...] | None) -> None:
        """Copy the chunks of ``rows`` (``None``: every chunk left) before they are written.
        Never raises into the writing code: a failure fails the save instead."""
        with self._cond:
            if self._over:
                return
            try:
                if rows is None:
                    chunks: Any = range(len(self._states))
                else:
                    chunks = [row // self._step for row in rows if 0 <= row < self._n_rows]
                for chunk in chunks:
                    while self._states[chunk] == self._COPYING and not self._over:
                        self._cond.wait()
                    if self._states[chunk] == self._TODO and not self._over:
                        self._copy(chunk)
                        self._states[chunk] = self._DONE
            except Exception as err:  # noqa: BLE001 - surfaced by the save (SaveHandle.wait)
                self._error, self._over = err, True
                self._cond.notify_all()

    def run(self) -> None:
        """Copy the chunks left, then stop watching; raises what went wrong (the shadow is
        then forgotten: it matches nothing)."""
        try:
            while (chunk := self._claim()) is not None:
                copied = False
                try:
                    self._copy(chunk)
                    copied = True
                finally:
                    with self._cond:
                        self._states[chunk] = self._DONE if copied else self._TODO
                        self._cond.notify_all()
        except BaseException as err:
            self._end(err)
            raise
        self._end(None)
        if self._error is not None:
            raise self._error

    def cancel(self) -> None:
        """Stop (for a save that will not write); the shadow matches nothing if it was not done."""
        self._end(RuntimeError("the background copy of the shadow was cancelled"))

    def _claim(self) -> int | None:
        with self._cond:
            while self._todo and not self._over:
                chunk = self._todo.popleft()
                if self._states[chunk] == self._TODO:
                    self._states[chunk] = self._COPYING
                    return chunk
            return None

    def _copy(self, chunk: int) -> None:
        rows = slice(chunk * self._step, (chunk + 1) * self._step)
        for live, shadow in self._pairs:
            shadow[rows] = live[rows]

    def _end(self, err: BaseException | None) -> None:
        with self._cond:
            finished = all(state == self._DONE for state in self._states)
            if err is not None and self._error is None and not finished:
                self._error = err
            self._over = True
            self._pairs = []  # the live arrays are not kept
            self._cond.notify_all()
        if self.unwatch is not None:
            self.unwatch()
        if self._error is not None:
            self._shadow.forget()


def _fits(shadows: list[np.ndarray], live: list[np.ndarray]) -> bool:
    """The shadow arrays can be refilled from ``live`` (same memory again: no second shadow)."""
    return len(shadows) == len(live) and all(s.shape == a.shape and s.dtype == a.dtype for s, a in zip(shadows, live))


def _key(arr: np.ndarray) -> tuple[Any, ...]:
    return (arr.__array_interface__["data"][0], arr.shape, arr.strides, arr.dtype.str)


def take(
    source: Any, arrays: list[tuple[str, np.ndarray]], held: list[Callable[[], None]], *, keep: bool = True
) -> tuple[list[tuple[str, np.ndarray]], Callable[[], None], Callable[[], None] | None] | None:
    """The shadow of ``source.owner`` brought up to ``arrays`` and held for one writer, with the
    function that lets it go and the one that completes it (``None`` when it is complete): the
    writer calls it before it reads the shadow. An earlier save still writing from the shadow
    is waited for.
    ``held``: the functions that let go the shadows this save holds already; a shadow among
    them (the same buffer reached twice) gives ``None``, as when the owner cannot be weakly
    referenced: the caller copies afresh.
    ``keep=False`` (a background save without ``incremental=True``): a shadow of this save's
    own, filled as a first snapshot is (a large copy by the writer, behind the write barrier,
    so the call does not wait for it) and given back once the writer has written; no later
    save finds it."""
    if keep:
        try:
            with _lock:
                shadow = _shadows.get(source.owner)
                if shadow is None:
                    shadow = _shadows[source.owner] = _Shadow()
        except TypeError:  # not weakly referenceable
            return None
        if shadow.let_go in held:
            _log.debug(
                "background save: the shadow of %s is taken by this save already; copying afresh",
                type(source.owner).__name__,
            )
            return None
    else:
        shadow = _Shadow(once=True)
    if not shadow.busy.acquire(blocking=False):
        _log.debug(
            "background save: waiting for the save still writing from the shadow of %s", type(source.owner).__name__
        )
        shadow.busy.acquire()
    try:
        copies = shadow.update(source, arrays)
    except BaseException:
        shadow.forget()
        shadow.let_go()
        raise
    fill = shadow.fill
    return (
        [(name, copy) for (name, _), copy in zip(arrays, copies)],
        shadow.let_go,
        None if fill is None else fill.run,
    )


def release_snapshots() -> int:
    """Drop the copies that background saves keep between saves: of replay buffers, and the
    memory of the copies of the tensors.

    A background save with ``incremental=True`` (what :class:`~zipsave.CheckpointManager` and
    :class:`zipsave.sb3.CheckpointCallback` use) keeps a copy of an SB3 replay buffer after it
    has written, so that the next save copies only the rows written since. That copy takes as
    much memory as the buffer until the buffer itself is freed, or until this is called; the
    next incremental save then makes a full copy again. It also keeps the memory its copies of
    the tensors took (as much as the model's tensors and optimizer state), so that the next
    save copies into pages already in place instead of faulting in fresh ones.

    Returns
    -------
    int
        The bytes let go. A shadow that a save is still writing from is freed when it has
        written.

    Examples
    --------
    >>> model.learn(100_000, callback=zipsave.sb3.CheckpointCallback("runs/dqn", every_steps=10_000))  # doctest: +SKIP
    >>> zipsave.release_snapshots()  # training is over: give the buffer's shadow back  # doctest: +SKIP
    """
    with _lock:
        shadows = list(_shadows.values())
        _shadows.clear()
    return sum(shadow.nbytes for shadow in shadows) + release_copies()
