"""A replay buffer's saved arrays put into a model's buffer: read straight into the live arrays
where they can hold them (a restore into a live model: no second copy of the buffer at any
moment), else read into fresh memory and set in their place.

A buffer that training has filled is resident; reading the saved one into fresh memory and
replacing it would hold both at once (twice the buffer at peak). A live array is read into
when it has the saved shape and dtype, is C-contiguous and writeable, and is plain host
memory of its own: numpy's allocation or an anonymous mapping zipsave made, not a file
mapping (``np.memmap``, an ``mmap=True`` load), and not memory another array of the buffer
also covers. Everything else is replaced, as a fresh model's never-touched zeros always are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core import LoadSession
from .._tensors import AnonymousMap, NpyHeader
from ..exceptions import IntegrityError, ZipsaveError
from ._her import HER_ARRAYS

__all__ = ["fill_buffer"]

_LEAVE_OUT = "replay_buffer"


def fill_buffer(src: LoadSession, buffer: Any, arrays: dict[str, Any]) -> bool:
    """Put the checked saved ``arrays`` (arrays, :class:`NpyHeader` stand-ins of unread members,
    or dicts of them per observation key) into ``buffer``. Members that go to fresh memory are
    read first, so a failure there leaves the live buffer as it was; a failure while reading in
    place empties the buffer (it no longer holds either run's data) and raises
    :class:`IntegrityError` saying so, or, with ``skip_broken_tensors=True``, records it as a
    skipped entry with a warning and returns ``False``."""
    slots = [
        (name, key, saved)
        for name, value in arrays.items()
        for key, saved in (value.items() if isinstance(value, dict) else [(None, value)])
    ]
    everything = _live_arrays(buffer)
    into: list[tuple[NpyHeader, np.ndarray]] = []
    replaced: list[tuple[str, str | None, np.ndarray]] = []
    for name, key, saved in slots:
        live = getattr(buffer, name)
        live = live[key] if key is not None else live
        if isinstance(saved, NpyHeader) and _fillable(live, saved, everything):
            into.append((saved, live))
        else:
            replaced.append(
                (
                    name,
                    key,
                    saved.as_declared(src.load_array(saved.member), src.name)
                    if isinstance(saved, NpyHeader)
                    else saved,
                )
            )
    for saved, live in into:
        try:
            src.read_array_into(saved.member, live, leave_out=_LEAVE_OUT)
        except (ZipsaveError, OSError) as err:
            _empty(buffer)
            emptied = _emptied_error(src, saved.member, err)
            if not src.options.skip_broken_tensors:
                raise emptied from err
            src.record_skip(saved.member, None, None, emptied)
            return False
    for name, key, value in replaced:
        if key is None:
            setattr(buffer, name, value)
        else:
            getattr(buffer, name)[key] = value  # the live dict keeps its other, filled keys
    return True


def _live_arrays(buffer: Any) -> list[np.ndarray]:
    out = []
    for value in vars(buffer).values():
        for arr in value.values() if isinstance(value, dict) else [value]:
            if isinstance(arr, np.ndarray):
                out.append(arr)
    return out


def _fillable(live: Any, saved: NpyHeader, everything: list[np.ndarray]) -> bool:
    if type(live) is not np.ndarray or live.shape != saved.shape or live.dtype != saved.dtype:
        return False
    if (saved.fortran_order and live.ndim > 1) or live.dtype.hasobject:
        return False
    if not (live.flags.c_contiguous and live.flags.writeable and live.flags.aligned) or not _plain_memory(live):
        return False
    # a view another array of the buffer shares would be written twice, with two members' data
    return not any(other is not live and np.may_share_memory(live, other) for other in everything)


def _plain_memory(arr: np.ndarray) -> bool:
    """Whether ``arr``'s memory is numpy's own allocation or an anonymous mapping zipsave made
    (never a file mapping, whose file a write would change or which a restore would detach)."""
    base: Any = arr
    for _ in range(64):
        if isinstance(base, np.memmap):
            return False
        if isinstance(base, np.ndarray):
            if base.base is None:
                return base.flags.owndata
            base = base.base
        elif isinstance(base, memoryview):
            base = base.obj
        else:
            return isinstance(base, AnonymousMap)
    return False


def _empty(buffer: Any) -> None:
    """Leave a partly overwritten buffer empty, so nothing samples from it: no transitions, and
    for HER no episodes (its bookkeeping is zeroed where it lives)."""
    buffer.pos, buffer.full = 0, False
    for name in HER_ARRAYS:
        arr = getattr(buffer, name, None)
        if isinstance(arr, np.ndarray) and arr.flags.writeable:
            arr[...] = 0
        elif arr is not None:
            setattr(buffer, name, np.zeros_like(arr))


def _emptied_error(src: LoadSession, member: str, err: BaseException) -> IntegrityError:
    detail = err.detail if isinstance(err, ZipsaveError) else f"{type(err).__name__}: {err}"
    return IntegrityError(
        f"{detail.rstrip('.')}. It was being read in place into the model's replay buffer, which "
        "therefore no longer holds either the saved or its own transitions: the buffer was emptied "
        "(pos=0, full=False) so that nothing samples from it.",
        archive=src.name,
        member=member,
        expected=getattr(err, "expected", None),
        found=getattr(err, "found", None),
        hint="Restore it from an intact checkpoint, or go on training with the empty buffer "
        "(restore with `exclude=['replay_buffer']` leaves a buffer untouched).",
    )
