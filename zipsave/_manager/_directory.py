"""Opening a checkpoint directory: refuse a folder that is not a manager's, take the lock,
read the index, and clear away what an interrupted run left behind."""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

from .._printable import visible
from .._tools import verify
from ..exceptions import CheckpointDirectoryError, ZipsaveWarning, caller_stacklevel
from ._index import INDEX_NAME, Checkpoint, decode_index, encode_index, is_checkpoint_name, is_temporary
from ._lock import LOCK_NAME, DirectoryLock, acquire
from ._resume import BROKEN_SUFFIX
from ._store import LocalStore, Store, open_store

__all__ = [
    "check_folder",
    "read_index",
    "is_manager_directory",
    "list_checkpoints",
    "missing_archives",
    "open_directory",
    "set_aside_archives",
    "verify_directory",
]

_log = logging.getLogger("zipsave")


def _read_index(store: Store) -> list[Checkpoint] | None:
    raw = store.read(INDEX_NAME)
    if raw is None:
        return None
    return decode_index(raw, location=store.location, target=store.target)


def read_index(store: Store) -> list[Checkpoint] | None:
    """The checkpoints the directory's index lists, or ``None`` when it has no index."""
    return _read_index(store)


def _not_a_manager(store: Store, names: list[str]) -> CheckpointDirectoryError:
    shown = ", ".join(f"`{n}`" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return CheckpointDirectoryError(
        f"`{store.location}` is not a checkpoint directory of zipsave: it has no `{INDEX_NAME}` "
        f"but holds {shown}. Nothing was changed or deleted.",
        hint="Give the manager an empty or new directory, or one a CheckpointManager created.",
    )


def _check_folder(store: Store, *, must_exist: bool) -> None:
    """A local path that is a file (or lies below one), or a missing one where it must exist,
    is named as such (rather than as the bare ``NotADirectoryError`` of listing it)."""
    if not isinstance(store, LocalStore):
        return
    folder = store.folder
    while folder and not os.path.lexists(folder):
        folder, previous = os.path.dirname(folder), folder
        if folder == previous:
            break
    if folder and os.path.exists(folder) and not os.path.isdir(folder):
        if folder == store.folder:
            import shlex  # a command to paste: the path quoted for the shell (only on this error)

            raise CheckpointDirectoryError(
                f"`{store.location}` is a file, not a checkpoint directory. Nothing was changed.",
                hint=f"`zipsave inspect {shlex.quote(store.location)}` looks inside an archive.",
            )
        raise CheckpointDirectoryError(
            f"checkpoint directory `{store.location}` lies below `{folder}`, which is a file. Nothing was changed."
        )
    if must_exist and not store.exists():
        raise CheckpointDirectoryError(f"checkpoint directory `{store.location}` does not exist.")


def check_folder(store: Store, *, must_exist: bool) -> None:
    """Refuse a local path that is a file (or lies below one), or is missing where it must exist."""
    _check_folder(store, must_exist=must_exist)


def _missing(found: list[Checkpoint], names: list[str]) -> list[Checkpoint]:
    """The listed checkpoints whose archives are not in the directory."""
    present = set(names)
    return [c for c in found if c.name not in present]


def _steps(checkpoints: list[Checkpoint]) -> str:
    steps = [str(c.step) for c in checkpoints]
    return f"step{'s' if len(steps) > 1 else ''} {', '.join(steps)}"


def missing_archives(
    directory: Any, checkpoints: list[Checkpoint], *, storage_options: dict[str, Any] | None = None
) -> list[Checkpoint]:
    """The checkpoints of ``checkpoints`` (as ``list_checkpoints`` gave them) whose archives
    are gone from ``directory``."""
    return _missing(checkpoints, open_store(directory, storage_options).names())


def set_aside_archives(directory: Any, *, storage_options: dict[str, Any] | None = None) -> list[str]:
    """The file names of the archives a resume found damaged and moved aside (``*.zip.broken``)."""
    names = open_store(directory, storage_options).names()
    return [n for n in names if n.endswith(BROKEN_SUFFIX) and is_checkpoint_name(n.removesuffix(BROKEN_SUFFIX))]


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
    _check_folder(store, must_exist=True)
    found = _read_index(store)
    if found is None:
        raise CheckpointDirectoryError(
            f"`{store.location}` has no `{INDEX_NAME}`, so it is not a checkpoint directory of zipsave."
        )
    return found


def is_manager_directory(directory: Any) -> bool:
    """Whether ``directory`` is a local folder holding a checkpoint index (cheap: one ``stat``)."""
    text = os.fspath(directory)
    return "://" not in text and os.path.isfile(os.path.join(text, INDEX_NAME))


def verify_directory(directory: Any, *, require_manifest: bool = False) -> list[str]:
    """Check every checkpoint a directory's index lists, as ``zipsave verify`` checks one
    archive (every byte); an archive the index lists that is gone is a problem too.

    Returns
    -------
    list of str
        One sentence per problem, each naming the checkpoint's file; empty when all are intact.
    """
    checkpoints = list_checkpoints(directory)
    gone = {c.step for c in missing_archives(directory, checkpoints)}
    problems = []
    for checkpoint in checkpoints:
        where = f"`{checkpoint.name}` (step {checkpoint.step})"
        if checkpoint.step in gone:
            problems.append(f"{where}: the index lists it, but the archive is gone.")
            continue
        problems += [f"{where}: {problem}" for problem in verify(checkpoint.path, require_manifest=require_manifest)]
    return problems


def open_directory(store: Store, *, break_lock: bool = False) -> tuple[DirectoryLock, list[Checkpoint]]:
    """Lock a checkpoint directory (creating it when new) and read its index; remove the
    leftovers of an interrupted save. A folder with files but no index is refused untouched."""
    _check_folder(store, must_exist=False)
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
        gone = _missing(found, names)
        if gone:
            found = [c for c in found if c not in gone]
            store.write(INDEX_NAME, encode_index(found))
            warnings.warn(
                f"checkpoint directory `{store.location}`: the index listed {_steps(gone)}, whose "
                f"archive{'s are' if len(gone) > 1 else ' is'} gone (deleted by hand?); "
                f"{'they were' if len(gone) > 1 else 'it was'} dropped from the index.",
                ZipsaveWarning,
                stacklevel=caller_stacklevel(),
            )
        listed = {c.name for c in found}
        leftovers = [n for n in names if is_temporary(n) or (is_checkpoint_name(n) and n not in listed)]
        for name in leftovers:
            store.delete(name)
        if leftovers:
            # An unlisted archive may also be one a person copied in to resume from: say so
            # where it shows (a logger without handlers prints warnings), not only at INFO.
            unlisted = [n for n in leftovers if is_checkpoint_name(n)]
            _log.log(
                logging.WARNING if unlisted else logging.INFO,
                "zipsave: removed %d leftover file(s) of an interrupted run from `%s`: %s%s",
                len(leftovers),
                visible(store.location),
                visible(", ".join(leftovers)),
                " (archives the index does not list are never resumed from; to resume from an archive "
                "of your own, use zipsave.restore or zipsave.load on it)"
                if unlisted
                else "",
            )
            if isinstance(store, LocalStore):
                store.sync()
        return lock, found
    except BaseException:
        lock.release()
        raise
