"""Reading one requested slice of a stored tensor chunk straight from its bytes in the file."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.checkpoint.planner import LoadPlanner, ReadItem

from .._archive import OrderedCrc
from ..exceptions import ArchiveFormatError, IntegrityError

__all__ = ["check_bools", "read_into", "runs"]

#: Pieces read at once: the CRC of one (on the archive layer's helper threads) overlaps
#: reading the next.
_PIECE = 8 << 20


def runs(
    shape: tuple[int, ...], offsets: tuple[int, ...], lengths: tuple[int, ...], itemsize: int
) -> Iterator[tuple[int, int]]:
    """The contiguous byte ranges ``(start, length)`` of the slice ``offsets:offsets+lengths``
    of a C-contiguous array of ``shape``, in C order (so they fill a buffer of the slice)."""
    if not shape:
        yield 0, itemsize
        return
    if any(n == 0 for n in lengths):
        return
    strides = [math.prod(shape[j + 1 :]) for j in range(len(shape))]
    k = len(shape) - 1
    while k > 0 and offsets[k] == 0 and lengths[k] == shape[k]:
        k -= 1
    run = lengths[k] * strides[k] * itemsize
    base = offsets[k] * strides[k]
    for index in itertools.product(*(range(offsets[j], offsets[j] + lengths[j]) for j in range(k))):
        yield (base + sum(i * s for i, s in zip(index, strides))) * itemsize, run


def read_into(
    view: Any,
    base: int,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    item: ReadItem,
    planner: LoadPlanner,
    *,
    crc: int | None,
    member_size: int | None,
    where: str,
    archive: Any,
    member: str,
) -> None:
    """Read ``item``'s slice of the chunk stored at ``base`` in ``view`` into the planner's tensor.

    The bytes go straight into the destination when it is a contiguous CPU tensor of the
    stored dtype, else into a buffer that is then copied. When the read covers the whole member
    and ``crc`` is given, its CRC-32 is computed on the archive layer's helper threads while
    reading, and checked.
    """
    offsets, lengths = tuple(item.storage_offsets), tuple(item.lengths)
    target = planner.resolve_tensor(item).detach()
    if tuple(target.shape) != lengths:
        raise ArchiveFormatError(
            f"{where}: the planner asks for a {tuple(lengths)} slice but gives a {tuple(target.shape)} tensor.",
            archive=archive,
            member=member,
        )
    itemsize = dtype.itemsize
    nbytes = math.prod(lengths) * itemsize
    whole = base == 0 and offsets == (0,) * len(shape) and lengths == tuple(shape) and member_size == nbytes
    direct = target.device.type == "cpu" and target.dtype == dtype and target.is_contiguous()
    buf = target if direct else torch.empty(lengths, dtype=dtype)
    dest = buf.reshape(-1).view(torch.uint8).numpy().data.cast("B") if nbytes else memoryview(b"")
    checker = OrderedCrc() if whole and crc is not None else None
    done = 0
    try:
        for start, length in runs(tuple(shape), offsets, lengths, itemsize):
            end = done + length
            while done < end:
                piece = dest[done : min(end, done + _PIECE)]
                got = view.read_at(base + start + (done - (end - length)), piece)
                if got != piece.nbytes:
                    raise ArchiveFormatError(
                        f"{where}: the member ends early (truncated).", archive=archive, member=member
                    )
                if checker is not None:
                    checker.feed(piece)
                done += piece.nbytes
        if checker is not None:
            checker.wait()
    except BaseException:
        if checker is not None:
            checker.cancel()
        raise
    actual = checker.value() if checker is not None else crc
    if actual != crc:
        raise IntegrityError(
            f"{where}: CRC-32 of the bytes read is {actual:08x}, the archive records {crc:08x} (corrupted).",
            archive=archive,
            member=member,
            hint="Run `zipsave verify` on the checkpoint.",
        )
    check_bools(buf, where, archive=archive, member=member)
    if not direct:
        target.copy_(buf)
    planner.commit_tensor(item, target)


def check_bools(t: torch.Tensor, where: str, **place: Any) -> None:
    """Refuse a bool tensor read from an archive's bytes that holds a byte other than 0 or 1,
    which torch leaves undefined and never writes (see :mod:`zipsave._booleans`)."""
    if t.dtype is torch.bool and t.numel() and bool(t.view(torch.uint8).max() > 1):
        raise ArchiveFormatError(f"{where}: a bool holds a byte other than 0 or 1, which torch never writes.", **place)
