"""Opening a checkpoint directory: refuse a folder that is not a manager's, take the lock,
read the index, and clear away what an interrupted run left behind."""

from __future__ import annotations

import logging
from typing import Any

from ..exceptions import CheckpointDirectoryError
from ._index import INDEX_NAME, Checkpoint, decode_index, encode_index, is_checkpoint_name, is_temporary
from ._lock import LOCK_NAME, DirectoryLock, acquire
from ._store import LocalStore, Store, open_store

__all__ = ["list_checkpoints", "open_directory"]

_log = logging.getLogger("zipsave")


def _read_index(store: Store) -> list[Checkpoint] | None:
    raw = store.read(INDEX_NAME)
    if raw is None:
        return None
    return decode_index(raw, location=store.location, target=store.target)


def _not_a_manager(store: Store, names: list[str]) -> CheckpointDirectoryError:
    shown = ", ".join(f"`{n}`" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return CheckpointDirectoryError(
        f"`{store.location}` is not a checkpoint directory of zipsave: it has no `{INDEX_NAME}` "
        f"but holds {shown}. Nothing was changed or deleted.",
        hint="Give the manager an empty or new directory, or one a CheckpointManager created.",
    )


def list_checkpoints(directory: Any, *, storage_options: dict[str, Any] | None = None) -> list[Checkpoint]:
    """The complete checkpoints of a directory, oldest step first, read without taking its lock.

    Parameters
    ----------
    directory
        The folder or fsspec URL a :class:`CheckpointManager` writes to.
    storage_options
        Options for the fsspec filesystem of a URL.

    Raises
    ------
    CheckpointDirectoryError
        The directory has no checkpoint index, or the index is unreadable.

    Examples
    --------
    >>> for checkpoint in list_checkpoints("checkpoints"):  # doctest: +SKIP
    ...     print(checkpoint.step, checkpoint.metrics)
    """
    store = open_store(directory, storage_options)
    found = _read_index(store)
    if found is None:
        raise CheckpointDirectoryError(
            f"`{store.location}` has no `{INDEX_NAME}`, so it is not a checkpoint directory of zipsave."
        )
    return found


def open_directory(store: Store, *, break_lock: bool = False) -> tuple[DirectoryLock, list[Checkpoint]]:
    """Lock a checkpoint directory (creating it when new) and read its index; remove the
    leftovers of an interrupted save. A folder with files but no index is refused untouched."""
    names = [n for n in store.names() if n != LOCK_NAME]
    if INDEX_NAME not in names and names:
        raise _not_a_manager(store, names)
    store.create()
    lock = acquire(store, break_lock=break_lock)
    try:
        found = _read_index(store)
        names = [n for n in store.names() if n != LOCK_NAME]
        if found is None:
            if names:  # files appeared between the first look and the lock
                raise _not_a_manager(store, names)
            found = []
            store.write(INDEX_NAME, encode_index(found))
        listed = {c.name for c in found}
        leftovers = [n for n in names if is_temporary(n) or (is_checkpoint_name(n) and n not in listed)]
        for name in leftovers:
            store.delete(name)
        if leftovers:
            _log.info("zipsave: removed %d leftover file(s) of an interrupted run from `%s`: %s",
                      len(leftovers), store.location, ", ".join(leftovers))
            if isinstance(store, LocalStore):
                store.sync()
        return lock, found
    except BaseException:
        lock.release()
        raise
