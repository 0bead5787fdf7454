"""DCP's failures as zipsave's errors: DCP wraps every rank's exception in one
``CheckpointException``, which derives from ``BaseException`` and escapes ``except Exception``."""

from __future__ import annotations

import os
from typing import Any, NoReturn

from torch.distributed.checkpoint.api import CheckpointException

from ..exceptions import ArchiveFormatError, ZipsaveError

__all__ = ["raise_zipsave_error"]


def raise_zipsave_error(
    err: CheckpointException, archive: Any, metadata_error: ZipsaveError | None = None, *, what: str = "the DCP load"
) -> NoReturn:
    """Raise the first :class:`ZipsaveError` a rank failed with, else the error reading the
    metadata, else an :class:`ArchiveFormatError` naming every rank's failure (``what`` names
    the step: ``"the DCP save"``, ``"consolidating the checkpoint"``)."""
    failures = getattr(err, "failures", None) or {}
    for rank in sorted(failures):
        exc = failures[rank][0] if isinstance(failures[rank], tuple) else failures[rank]
        if isinstance(exc, ZipsaveError):
            _reraise(exc, err)
    if metadata_error is not None:
        _reraise(metadata_error, err)
    causes = "; ".join(
        f"rank {rank}: {type(_first(f)).__name__}: {_first(f)}" for rank, f in sorted(failures.items())
    ) or str(err)
    # The first rank's own exception is the cause (DCP's CheckpointException only gathers them).
    first = _first(failures[min(failures)]) if failures else None
    raise ArchiveFormatError(
        f"{what} failed ({causes}).",
        archive=os.fspath(archive) if isinstance(archive, (str, os.PathLike)) else None,
        hint="The checkpoint's metadata or files are not what DCP wrote: `zipsave.dcp.verify(path)` checks every "
        "archive of a checkpoint; load an intact copy.",
    ) from (first if isinstance(first, BaseException) else err)


def _reraise(exc: ZipsaveError, gathered: BaseException) -> NoReturn:
    """Raise ``exc``, keeping the cause it was raised from (the rank's own exception); only
    one without a cause gets DCP's gathering exception."""
    if exc.__cause__ is None:
        raise exc from gathered
    raise exc


def _first(failure: Any) -> Any:
    return failure[0] if isinstance(failure, tuple) else failure
