"""One huge-page arena for the fresh storages of a copying load, where the OS has huge pages
free right now.

Reading into memory backed by 2 MiB pages takes a fraction of the page faults of 4 KiB ones
(the raw read floor of ``docs/benchmarks.rst``). Asking for them is only safe when they are
free: with ``defrag=madvise`` a fault in an advised region otherwise compacts memory
synchronously, and a load stalls for longer than it saves. So :func:`host_arena` first reads
``/proc/buddyinfo`` and builds an arena only when free blocks of 2 MiB or more cover twice
what it needs; anywhere else (other OS, THP off, memory fragmented) it returns ``None`` and
the load uses one ``torch.empty`` per storage, as before.

Each storage is its own tensor over a slice of the arena (``torch.frombuffer``): saving,
sharing or optimising one touches no other, and it cannot be grown in place, as the tensors
of ``torch.load`` cannot. The arena is unmapped when the last tensor over it is freed.
"""

from __future__ import annotations

import mmap
import sys
from collections.abc import Sequence

import torch

__all__ = ["ARENA_MIN", "AnonymousMap", "fresh_map", "host_arena"]

#: Members whose fresh storages total less than this read into plain ``torch.empty`` buffers.
ARENA_MIN = 32 << 20

_HUGE = 2 << 20
_ALIGN = 64  # each storage starts on a cache line, as torch's allocator aligns them
_HUGE_ORDER = 9  # 2 MiB = 2**9 pages of 4 KiB


class AnonymousMap(mmap.mmap):
    """An anonymous private mapping zipsave made: plain host memory of this process, backed by
    no file, so a later restore may read into arrays over it in place (a file mapping, such
    as ``mmap=True`` gives, is never written through)."""


def _thp_mode(text: str) -> str | None:
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def free_huge_blocks(buddyinfo: str) -> int:
    """How many free 2 MiB blocks ``/proc/buddyinfo`` lists (larger free blocks count as
    several)."""
    total = 0
    for line in buddyinfo.splitlines():
        fields = line.split()
        if "zone" not in fields:
            continue
        counts = fields[fields.index("zone") + 2 :]
        for order, count in enumerate(counts):
            if order >= _HUGE_ORDER and count.isdigit():
                total += int(count) << (order - _HUGE_ORDER)
    return total


def _huge_pages_free(nbytes: int) -> bool:
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as f:
            if _thp_mode(f.read()) not in ("always", "madvise"):
                return False
        with open("/proc/buddyinfo", encoding="ascii") as f:
            free = free_huge_blocks(f.read())
    except (OSError, ValueError):
        return False
    return free * _HUGE >= 2 * nbytes


def fresh_map(nbytes: int, *, huge: bool | None = None) -> tuple[AnonymousMap, bool] | None:
    """One anonymous private mapping of ``nbytes`` (``None`` if the OS refuses) and whether it
    is advised for huge pages: so when ``huge`` is true, or (``huge=None``) when free huge
    pages cover twice ``nbytes`` now (:func:`_huge_pages_free`). Otherwise it is plain 4 KiB
    pages, never advised, so no fault waits for compaction (numpy's own large allocations
    are always advised for huge pages)."""
    if huge is None:
        huge = nbytes >= ARENA_MIN and _huge_pages_free(nbytes)
    size = (nbytes + _HUGE - 1) // _HUGE * _HUGE if huge else max(nbytes, 1)
    try:
        arena = AnonymousMap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if huge:
            arena.madvise(mmap.MADV_HUGEPAGE)
            tail = nbytes // _HUGE * _HUGE
            if tail < size:  # the last, partly used huge page: 4 KiB pages, so only used bytes count
                arena.madvise(mmap.MADV_NOHUGEPAGE, tail, size - tail)
    except (OSError, ValueError, AttributeError):
        return None
    return arena, huge


def host_arena(lengths: Sequence[int]) -> list[tuple[torch.Tensor, memoryview]] | None:
    """``(uint8 tensor, writable view of its bytes)`` for each length, all in one anonymous
    mapping advised for huge pages; ``None`` when the lengths are small or huge pages are not
    free now."""
    offsets, total = [], 0
    for length in lengths:
        offsets.append(total)
        total += (length + _ALIGN - 1) // _ALIGN * _ALIGN
    if total < ARENA_MIN or not _huge_pages_free(total):
        return None
    mapped = fresh_map(total, huge=True)  # a whole number of huge pages keeps it aligned
    if mapped is None:
        return None
    whole = memoryview(mapped[0])
    out = []
    for offset, length in zip(offsets, lengths):
        view = whole[offset : offset + length]
        tensor = torch.frombuffer(view, dtype=torch.uint8) if length else torch.empty(0, dtype=torch.uint8)
        out.append((tensor, view))
    return out
