"""Incremental snapshots for background saves: a shadow copy of a growing object's arrays kept
between saves, so a later save copies only the rows written since the last one.

An integration opts a component in by putting a *source* in ``Parts.snapshot`` (SB3's replay
buffers: ``zipsave/sb3/_snapshot.py``). A source has

* ``owner``: the live object the shadow belongs to (weakly referenced: the shadow goes with it);
* ``state()``: its bookkeeping now (any comparable value, e.g. a position and a step counter);
* ``dirty_rows(previous_state)``: ``(ranges, reason)``, the ``[start, stop)`` row ranges
  written since ``previous_state``, or ``None`` and why they cannot be known;
* ``row_indexed(array)``: whether the array's rows change only where ``dirty_rows`` says
  (the others are copied whole each time, as bookkeeping rewritten for past rows must be).

Whatever does not add up falls back to a full copy: an array replaced, moved or reshaped, no
known dirty rows, or a sample of rows outside them that differs between the live arrays and the
shadow. A writer holds the shadow until it has written; a save that finds it held waits for
that writer, so there is never more than the one shadow (the fresh copy it would make instead
is as large as the buffer, once per save that arrives while the disk is behind).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .._tensors import fresh_copy

__all__ = ["release_snapshots", "take"]

_log = logging.getLogger("zipsave")

#: Rows outside the dirty ranges compared between the live arrays and the shadow at each save.
SAMPLED_ROWS = 16

_lock = threading.Lock()
_shadows: weakref.WeakKeyDictionary[Any, _Shadow] = weakref.WeakKeyDictionary()


class _Shadow:
    """One live object's shadow arrays and the state they match."""

    def __init__(self) -> None:
        self.busy = threading.Lock()  # held from the copy until the writer has written
        self.state: Any = None
        self.names: list[str] = []
        self.refs: list[weakref.ref] = []
        self.keys: list[tuple[Any, ...]] = []
        self.arrays: list[np.ndarray] = []

    @property
    def nbytes(self) -> int:
        return sum(arr.nbytes for arr in self.arrays)

    def forget(self) -> None:
        self.state, self.names, self.refs, self.keys, self.arrays = None, [], [], [], []

    def update(self, source: Any, arrays: list[tuple[str, np.ndarray]]) -> list[np.ndarray]:
        """Bring the shadow up to the live arrays; returns the shadow arrays."""
        state = source.state()
        live = [arr for _, arr in arrays]
        ranges: list[tuple[int, int]] | None = None
        reason: str | None = "first snapshot"
        if self.state is not None:
            reason = self._arrays_changed(arrays)
            if reason is None:
                ranges, reason = source.dirty_rows(self.state)
            if ranges is not None:
                reason = self._sample_differs(source, live, ranges)
                if reason is not None:
                    ranges = None
        # Until the copy below has finished the shadow matches no state: an error midway leaves
        # it to be filled afresh by the next save.
        self.state = None
        if ranges is None:
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
        reuse = len(self.arrays) == len(live) and all(
            s.shape == a.shape and s.dtype == a.dtype for s, a in zip(self.arrays, live)
        )
        if reuse:  # same memory again: no second shadow while the first is refilled
            for shadow, arr in zip(self.arrays, live):
                np.copyto(shadow, arr, casting="no")
        else:
            self.arrays = []  # drop the old shadow before allocating the new one
            self.arrays = [fresh_copy(arr) for arr in live]

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


def _key(arr: np.ndarray) -> tuple[Any, ...]:
    return (arr.__array_interface__["data"][0], arr.shape, arr.strides, arr.dtype.str)


def take(
    source: Any, arrays: list[tuple[str, np.ndarray]], held: list[Callable[[], None]]
) -> tuple[list[tuple[str, np.ndarray]], Callable[[], None]] | None:
    """The shadow of ``source.owner`` brought up to ``arrays`` and held for one writer, with the
    function that lets it go. An earlier save still writing from the shadow is waited for.
    ``held``: the functions that let go the shadows this save holds already; a shadow among
    them (the same buffer reached twice) gives ``None``, as when the owner cannot be weakly
    referenced: the caller copies afresh."""
    try:
        with _lock:
            shadow = _shadows.get(source.owner)
            if shadow is None:
                shadow = _shadows[source.owner] = _Shadow()
    except TypeError:  # not weakly referenceable
        return None
    if shadow.busy.release in held:
        _log.debug(
            "background save: the shadow of %s is taken by this save already; copying afresh",
            type(source.owner).__name__,
        )
        return None
    if not shadow.busy.acquire(blocking=False):
        _log.debug(
            "background save: waiting for the save still writing from the shadow of %s", type(source.owner).__name__
        )
        shadow.busy.acquire()
    try:
        copies = shadow.update(source, arrays)
    except BaseException:
        shadow.forget()
        shadow.busy.release()
        raise
    return [(name, copy) for (name, _), copy in zip(arrays, copies)], shadow.busy.release


def release_snapshots() -> int:
    """Drop the shadow copies that background saves keep of replay buffers between saves.

    A background save with ``incremental=True`` (what :class:`~zipsave.CheckpointManager` and
    :class:`zipsave.sb3.CheckpointCallback` use) keeps a copy of an SB3 replay buffer after it
    has written, so that the next save copies only the rows written since. That copy takes as
    much memory as the buffer until the buffer itself is freed, or until this is called; the
    next incremental save then makes a full copy again.

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
    return sum(shadow.nbytes for shadow in shadows)
