"""One huge-page arena for the fresh storages of a copying load, where ``ZIPSAVE_HUGE_PAGES=1``
asks for one and the OS has huge pages free right now.

Reading into memory backed by 2 MiB pages takes a fraction of the page faults of 4 KiB ones
(the raw read floor of ``docs/benchmarks.rst``). Asking for them is only safe when they are
free: with ``defrag=madvise`` a fault in an advised region otherwise compacts memory
synchronously, and a load stalls for longer than it saves. So :func:`host_arena` first reads
``/proc/buddyinfo`` and builds an arena only when free blocks of 2 MiB or more cover twice
what it needs; anywhere else (other OS, THP off, memory fragmented) it returns ``None`` and
the load uses one ``torch.empty`` per storage, as it does by default (:data:`HUGE_PAGES`).

Fresh pages, huge or not, are the slow case: memory the process already holds is faster
still. When the C allocator holds free memory that covers the load (a model of the same size
was just freed, or a loop loads one checkpoint after another), ``torch.empty`` reuses those
resident pages, as ``torch.load`` does, and :func:`host_arena` returns ``None`` to let it:
glibc's ``mallinfo2`` says how much is free (``fordblks``), in one call that walks its bins.

Each storage is its own tensor over a slice of the arena (``torch.frombuffer``): saving,
sharing or optimising one touches no other, and it cannot be grown in place, as the tensors
of ``torch.load`` cannot. The arena is unmapped when the last tensor over it is freed.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import sys
from collections.abc import Sequence

import torch

__all__ = ["ARENA_MIN", "AnonymousMap", "fresh_map", "host_arena"]

#: Whether fresh storages may come from huge pages at all (``ZIPSAVE_HUGE_PAGES=1``). Off by
#: default: on the benchmark machine (a VM whose free memory goes back to the host) a fresh
#: huge page took 16-20 ms to fault in, 4x the cost per byte of 4 KiB pages, and a first load
#: through the arena took 0.9-1.2 s where ``torch.empty`` took 0.28-0.36 s and ``torch.load``
#: 0.23-0.36 s (``docs/benchmarks.rst``). Where huge pages pay, the variable turns them on.
HUGE_PAGES = os.environ.get("ZIPSAVE_HUGE_PAGES", "") == "1"

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


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _mallinfo2() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        func = ctypes.CDLL(None).mallinfo2  # glibc 2.33 and later; absent from musl
    except (OSError, AttributeError):
        return None
    func.argtypes, func.restype = [], _MallInfo2
    return func


def allocator_free_bytes() -> int:
    """Bytes the C allocator holds free for reuse (glibc's ``fordblks``), 0 where unknown."""
    func = _mallinfo2()
    return int(func().fordblks) if func is not None else 0  # type: ignore[operator]


def _huge_pages_free(nbytes: int) -> bool:
    if not HUGE_PAGES or not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"):
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
    mapping advised for huge pages; ``None`` when the lengths are small, the C allocator holds
    enough free (resident) memory for them, or huge pages are not free now."""
    offsets, total = [], 0
    for length in lengths:
        offsets.append(total)
        total += (length + _ALIGN - 1) // _ALIGN * _ALIGN
    if total < ARENA_MIN or not _huge_pages_free(total) or allocator_free_bytes() >= total:
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
