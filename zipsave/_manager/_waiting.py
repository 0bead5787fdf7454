"""Managers of one process, and waiting for new checkpoints.

A directory has one writing manager. A second one in the same process is almost always the
same cell of a notebook run again: the newer object takes the directory over, the older one
finishes its pending saves, lets the lock go and refuses to save from then on (with an error
that says why). Another process still meets the lock.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from ._index import Checkpoint
from ._store import LocalStore

__all__ = ["new_checkpoints", "register", "take_over", "wait_for_new"]

_log = logging.getLogger("zipsave")
_guard = threading.Lock()
_holders: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def _key(manager: Any) -> str:
    store = manager._store
    if isinstance(store, LocalStore):
        return os.path.realpath(store.folder)
    return str(store.location)


def register(manager: Any) -> None:
    """Record ``manager`` as the holder of its directory in this process."""
    with _guard:
        _holders[_key(manager)] = manager


def take_over(manager: Any) -> None:
    """Let an older manager of this process that holds ``manager``'s directory go. One that
    released the directory on purpose (:meth:`CheckpointManager.release`) is left alone: it
    holds nothing."""
    with _guard:
        older = _holders.get(_key(manager))
    if older is None or older is manager or older._lock is None:
        return
    _log.info(
        "zipsave: a new CheckpointManager of `%s` takes the directory over from an older one of this "
        "process, which saves no more",
        manager.directory,
    )
    older._supersede()


def wait_for_new(manager: Any, after_step: int | None, *, timeout: float | None, poll: float) -> Checkpoint | None:
    if timeout is not None and timeout < 0:
        raise ValueError(f"`timeout` must be None or a number of seconds >= 0, got {timeout!r}.")
    if not (isinstance(poll, (int, float)) and poll > 0):
        raise ValueError(f"`poll` must be a positive number of seconds, got {poll!r}.")
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        newest = manager.latest()
        if newest is not None and (after_step is None or newest.step > after_step):
            return newest
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None
        time.sleep(poll if left is None else min(poll, left))


def new_checkpoints(
    manager: Any, after_step: int | None, *, timeout: float | None, poll: float
) -> Iterator[Checkpoint]:
    step = after_step
    while True:
        found = wait_for_new(manager, step, timeout=timeout, poll=poll)
        if found is None:
            return
        step = found.step
        yield found
