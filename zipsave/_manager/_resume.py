"""Resuming from the newest checkpoint that is intact: a damaged or vanished newest archive is
named in a warning and set aside, and the run goes on from the one before it."""

from __future__ import annotations

import contextlib
import posixpath
import warnings
from collections.abc import Callable
from typing import Any

from .. import _format
from .._tools import verify
from ..exceptions import (
    ArchiveFormatError,
    ArchiveLimitError,
    ArchiveNotFoundError,
    IntegrityError,
    ZipsaveWarning,
    caller_stacklevel,
)
from ._index import Checkpoint
from ._store import Store

__all__ = ["BROKEN_SUFFIX", "newest_intact", "require_metric"]

#: A damaged archive is renamed ``step-<step>.zip.broken``: kept for a look, never listed again.
BROKEN_SUFFIX = ".broken"


# Only damage is skipped: an archive that is gone, one whose tensors fail a checksum, and one
# that fails to read where `zipsave verify` finds it broken too. ArchiveFormatError also
# stands for "this archive is not of the kind you asked for" (an SB3 model loaded without
# `cls=`), and that, a mismatch with the object, an untrusted pickle, a storage fault (a
# network error) or a safety limit (a grown replay buffer over `Limits.max_member_bytes`)
# would fail on an older checkpoint as well, or not at all next time, or pass on an older,
# smaller one: those are raised, never skipped.
def _damaged(err: BaseException, store: Store, checkpoint: Checkpoint) -> bool:
    if isinstance(err, IntegrityError):
        # A `data` or `init.json` that differs from the manifest was most likely edited by
        # hand (allowed; `strict=False` accepts it): the person who did it decides.
        return posixpath.basename(err.member or "") not in (_format.DATA, _format.INIT)
    if isinstance(err, ArchiveNotFoundError):
        return True
    if not isinstance(err, ArchiveFormatError) or isinstance(err, ArchiveLimitError):
        return False
    try:
        with store.open(checkpoint.name) as fp:
            return bool(verify(fp))
    except FileNotFoundError:
        return True  # gone meanwhile
    except OSError:
        return False  # the storage (StorageError too), not the archive: raise the original error


def newest_intact(
    checkpoints: list[Checkpoint],
    attempt: Callable[[Checkpoint], Any],
    *,
    store: Store,
    location: str,
    set_aside: bool = True,
) -> tuple[Checkpoint | None, Any, list[Checkpoint]]:
    """Call ``attempt`` on the newest checkpoint, then on older ones while the archive turns out
    damaged or gone. Returns the checkpoint that worked, ``attempt``'s result, and the damaged
    newer ones, which are warned about and (with ``set_aside``) renamed ``<name>.broken``. When
    none works nothing is renamed and the newest one's error is raised, with the others' as a note."""
    failed: list[tuple[Checkpoint, BaseException]] = []
    for checkpoint in reversed(checkpoints):
        try:
            result = attempt(checkpoint)
        except (ArchiveFormatError, ArchiveNotFoundError) as err:
            if not _damaged(err, store, checkpoint):
                raise
            failed.append((checkpoint, err))
            continue
        for damaged, cause in failed:
            kept = ""
            if set_aside and not isinstance(cause, ArchiveNotFoundError):
                _set_aside(store, damaged)
                kept = f"; it was moved to `{damaged.name}{BROKEN_SUFFIX}`"
            warnings.warn(
                f"checkpoint directory `{location}`: the checkpoint of step {damaged.step} cannot be resumed "
                f"from ({type(cause).__name__}: {cause}). Resumed from step {checkpoint.step} instead{kept}.",
                ZipsaveWarning,
                stacklevel=caller_stacklevel(),
            )
        return checkpoint, result, [damaged for damaged, _ in failed]
    if not failed:
        return None, None, []
    newest = failed[0][1]
    if len(failed) > 1:
        older = ", ".join(f"step {c.step} ({type(e).__name__})" for c, e in failed[1:])
        newest.add_note(f"No older checkpoint could be resumed from either: {older}.")
    raise newest


def _set_aside(store: Store, checkpoint: Checkpoint) -> None:
    with contextlib.suppress(FileNotFoundError):
        store.rename(checkpoint.name, checkpoint.name + BROKEN_SUFFIX)


def require_metric(checkpoints: list[Checkpoint], metric: str | None, location: str) -> None:
    """Raise when there are checkpoints but none has ``metric``: a misspelt name must not read
    as "no checkpoint yet" (start fresh)."""
    if checkpoints:
        have = sorted({key for c in checkpoints for key in c.metrics})
        raise ValueError(
            f"checkpoint directory `{location}`: none of its {len(checkpoints)} checkpoints has the "
            f"metric {metric!r}; they have {have or 'no metrics'}. Name one of those, or use `restore_latest`."
        )
