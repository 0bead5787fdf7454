"""``zipsave.dcp.save``/``load``: DCP's save and load with the zipsave storage, raising zipsave's errors."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any, NoReturn

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from ..exceptions import ZipsaveError
from ._reader import ZipReader
from ._writer import ZipWriter

__all__ = ["load", "raise_zipsave_error", "save"]


def _unwrap(err: CheckpointException, *, what: str, path: Any) -> NoReturn:
    """Raise the first ZipsaveError a rank failed with, else a ZipsaveError naming each rank's
    failure. DCP wraps every rank's failure in one ``CheckpointException``, which derives from
    ``BaseException``, so ``except Exception`` would not catch it; zipsave's entry points raise
    zipsave's errors instead (the original stays attached as the cause)."""
    failures = {rank: failure[0] if isinstance(failure, tuple) else failure for rank, failure in err.failures.items()}
    for rank in sorted(failures):
        if isinstance(failures[rank], ZipsaveError):
            raise failures[rank] from err
    ranks = "; ".join(f"rank {rank}: {type(exc).__name__}: {exc}" for rank, exc in sorted(failures.items()))
    raise ZipsaveError(
        f"{what} failed ({ranks or err}).",
        archive=os.fspath(path) if isinstance(path, (str, os.PathLike)) else None,
        hint="The cause is above; `zipsave.dcp.verify(path)` checks a checkpoint's every archive.",
    ) from err


@contextlib.contextmanager
def _single_process_quiet(kwargs: dict[str, Any]) -> Iterator[None]:
    """Without a process group DCP works in one process and warns that it assumes so; here
    that is the documented use, so the warning is not repeated to the caller."""
    if kwargs.get("no_dist") or not (dist.is_available() and dist.is_initialized()):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
            yield
    else:
        yield


def save(state_dict: dict[str, Any], path: str | os.PathLike, *, sync_files: bool = True, sha256: bool = False,
         **kwargs: Any) -> Any:
    """``torch.distributed.checkpoint.save(state_dict, storage_writer=ZipWriter(path))``.

    Call it on every rank of the process group, or in one process without one. A failure
    caused by the storage raises its :class:`~zipsave.ZipsaveError` on every rank instead of
    DCP's ``CheckpointException``; other failures raise that exception unchanged.

    Parameters
    ----------
    state_dict
        What DCP saves (e.g. ``{"model": ..., "optim": ...}`` from ``get_state_dict``).
    path
        The checkpoint directory.
    sync_files, sha256
        As for :class:`ZipWriter`.
    **kwargs
        Passed to ``dcp.save`` (``planner``, ``process_group``, ``no_dist``).

    Returns
    -------
    Metadata
        What ``dcp.save`` returns.
    """
    try:
        with _single_process_quiet(kwargs):
            return dcp.save(state_dict, storage_writer=ZipWriter(path, sync_files=sync_files, sha256=sha256), **kwargs)
    except CheckpointException as err:
        _unwrap(err, what="the DCP save", path=path)


def load(state_dict: dict[str, Any], path: str | os.PathLike, *, allow_pickle: bool = False, **kwargs: Any) -> None:
    """``torch.distributed.checkpoint.load(state_dict, storage_reader=ZipReader(path))``, in place.

    ``path`` is a checkpoint directory of :class:`ZipWriter` or one ordinary zipsave
    archive; each rank reads the slices its ``state_dict`` holds (resharding as needed). A
    missing or damaged rank archive or member raises :class:`~zipsave.ZipsaveError` (naming
    the rank and member) on every rank.

    Parameters
    ----------
    state_dict
        The live state dict to fill (DTensors, sharded or plain tensors).
    path
        Checkpoint directory or archive.
    allow_pickle
        As for :class:`ZipReader`.
    **kwargs
        Passed to ``dcp.load`` (``planner``, ``process_group``, ``no_dist``).
    """
    reader = ZipReader(path, allow_pickle=allow_pickle)
    try:
        with _single_process_quiet(kwargs):
            dcp.load(state_dict, storage_reader=reader, **kwargs)
    except CheckpointException as err:
        if reader.metadata_error is not None and not any(
            isinstance(f[0] if isinstance(f, tuple) else f, ZipsaveError) for f in err.failures.values()
        ):
            raise reader.metadata_error from err
        _unwrap(err, what="the DCP load", path=path)


raise_zipsave_error = _unwrap
