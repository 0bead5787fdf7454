"""``zipsave.dcp.save``/``load``: DCP's save and load with the zipsave storage, raising zipsave's errors."""

from __future__ import annotations

import os
from typing import Any

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from .._archive import Limits
from ..exceptions import reading
from ._errors import raise_zipsave_error
from ._reader import ZipReader
from ._writer import ZipWriter

__all__ = ["load", "raise_zipsave_error", "save"]


def save(
    state_dict: dict[str, Any], path: str | os.PathLike, *, sync_files: bool = True, sha256: bool = False, **kwargs: Any
) -> Any:
    """``torch.distributed.checkpoint.save(state_dict, storage_writer=ZipWriter(path))``.

    Call it on every rank of the process group, or in one process without one (DCP then says
    that it assumes a single process, in its own warning: warning filters are process-wide, so
    zipsave leaves them alone). A failure
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
        return dcp.save(state_dict, storage_writer=ZipWriter(path, sync_files=sync_files, sha256=sha256), **kwargs)
    except CheckpointException as err:
        raise_zipsave_error(err, path, what="the DCP save")


def load(
    state_dict: dict[str, Any],
    path: str | os.PathLike,
    *,
    allow_pickle: bool = False,
    limits: Limits | None = None,
    **kwargs: Any,
) -> None:
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
    allow_pickle, limits
        As for :class:`ZipReader`.
    **kwargs
        Passed to ``dcp.load`` (``planner``, ``process_group``, ``no_dist``).
    """
    with reading(path):  # the error boundary: what reading the checkpoint raises names it
        reader = ZipReader(path, allow_pickle=allow_pickle, limits=limits)
        try:
            dcp.load(state_dict, storage_reader=reader, **kwargs)
        except CheckpointException as err:
            raise_zipsave_error(err, path, reader.metadata_error)
