"""Fresh host memory for the storages of a copying load: one anonymous mapping per member (an
arena), advised for huge pages where the OS has them free, and kept for the next load once its
tensors are freed.

A copying load reads into fresh memory, and on the benchmark machine (a virtual machine) the
page faults that back it, not the copy, were most of a load's time (``docs/benchmarks.rst``).
Three ways around them, cheapest first:

- memory the process already holds: when the C allocator holds free memory that covers the
  load (glibc's ``mallinfo2``: ``fordblks``), ``torch.empty`` reuses those resident pages, as
  ``torch.load`` does, and :func:`host_arena` returns ``None`` to let it;
- an idle arena: when every tensor over an arena is freed, the arena is not unmapped but kept
  (at most :data:`KEEP_ARENAS` of them, :data:`KEEP_BYTES` in all) for the next load of about
  its size, its pages marked ``MADV_FREE`` so that the kernel may take them back under memory
  pressure instead of swapping (a loop loading checkpoint after checkpoint faults nothing after
  its first load); :func:`release_idle` unmaps them at once;
- a fresh arena, advised for 2 MiB pages when ``/proc/buddyinfo`` shows free blocks of that
  size covering twice what it needs (with ``defrag=madvise`` a huge-page fault otherwise
  compacts memory synchronously), which the caller populates on a helper thread ahead of the
  reads (``_prefault.Prefaulter``); 4 KiB pages elsewhere (:data:`HUGE_PAGES`).

Each storage is its own tensor over a slice of the arena (``torch.frombuffer``): saving,
sharing or optimising one touches no other, and it cannot be grown in place, as the tensors
of ``torch.load`` cannot. The arena goes back (to the idle list, or to the OS) when the last
tensor over it is freed.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import sys
import weakref
from collections.abc import Sequence

import numpy as np
import torch

__all__ = [
    "ALIGN",
    "ARENA_MIN",
    "AnonymousMap",
    "HostArena",
    "aligned_offsets",
    "fresh_map",
    "host_arena",
    "release_idle",
]

#: Whether fresh arenas may be advised for huge pages (where ``/proc/buddyinfo`` shows them
#: free): ``ZIPSAVE_HUGE_PAGES=1``. Off by default: on the benchmark machine (a VM whose free
#: memory goes back to the host) a fresh huge page took 8-16 ms to fault in, and a first load
#: through a huge-page arena took 4.67x ``torch.load`` (``docs/benchmarks.rst``). Where huge
#: pages pay, the variable turns them on.
HUGE_PAGES = os.environ.get("ZIPSAVE_HUGE_PAGES", "") == "1"

#: How many idle arenas are kept for the next loads, and how many bytes they may hold in all
#: (a load of a model and its optimizer state takes one arena per member).
KEEP_ARENAS = 2
KEEP_BYTES = 2 << 30

#: Members whose fresh storages total less than this read into plain ``torch.empty`` buffers.
ARENA_MIN = 32 << 20

_HUGE = 2 << 20
ALIGN = 64  # each storage starts on a cache line, as torch's allocator aligns them
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


# -- idle arenas ------------------------------------------------------------------------------
_idle: list[AnonymousMap] = []  # most recently freed last; list operations are atomic under the GIL
_idle_pid = os.getpid()  # a forked child shares these pages copy-on-write: it keeps none of them


def _retire(arena: AnonymousMap) -> None:
    """The last tensor over ``arena`` was freed: keep it for the next load (its pages lazily
    freed, ``MADV_FREE``), dropping the oldest idle arenas beyond the limits, or let it go."""
    global _idle_pid
    if os.getpid() != _idle_pid:
        _idle.clear()
        _idle_pid = os.getpid()
    if len(arena) > KEEP_BYTES or KEEP_ARENAS <= 0:
        return
    try:
        arena.madvise(mmap.MADV_FREE)
    except (OSError, ValueError, AttributeError):
        pass  # kept resident as it is (no MADV_FREE before Linux 4.5)
    _idle.append(arena)
    while len(_idle) > KEEP_ARENAS or sum(len(each) for each in _idle) > KEEP_BYTES:
        _idle.pop(0)


def _take_idle(nbytes: int) -> AnonymousMap | None:
    """The smallest idle arena of ``nbytes`` up to twice that, taken off the idle list."""
    if os.getpid() != _idle_pid:
        return None
    fits = [each for each in list(_idle) if nbytes <= len(each) <= 2 * nbytes + _HUGE]
    for arena in sorted(fits, key=len):
        try:
            _idle.remove(arena)
        except ValueError:  # another thread took it
            continue
        return arena
    return None


def release_idle() -> int:
    """Unmap every idle arena now; returns the bytes given back."""
    freed = sum(len(each) for each in _idle)
    _idle.clear()
    return freed


class HostArena:
    """The storages of one member: ``parts`` holds ``(uint8 tensor, writable view of its
    bytes)`` per length; ``fresh`` says whether the pages are still to be faulted in (a
    new mapping, which the caller populates ahead of its reads) or resident (an idle one)."""

    __slots__ = ("parts", "fresh")

    def __init__(self, parts: list[tuple[torch.Tensor, memoryview]], fresh: bool) -> None:
        self.parts = parts
        self.fresh = fresh

    def __repr__(self) -> str:
        return f"HostArena(parts=<{len(self.parts)} storages>, fresh={self.fresh!r})"


def aligned_offsets(lengths: Sequence[int]) -> tuple[list[int], int]:
    """Where each of ``lengths`` starts when they are laid side by side, each on a cache line,
    and the bytes they take in all."""
    offsets, total = [], 0
    for length in lengths:
        offsets.append(total)
        total += (length + ALIGN - 1) // ALIGN * ALIGN
    return offsets, total


def host_arena(lengths: Sequence[int]) -> HostArena | None:
    """Storages for ``lengths`` in one anonymous mapping: an idle arena where one fits (its
    pages resident, unless the kernel took them back under memory pressure), else ``None``
    when the lengths are small or the C allocator holds enough free (resident) memory for
    them, else a fresh mapping (advised for huge pages where they are free now)."""
    offsets, total = aligned_offsets(lengths)
    if total < ARENA_MIN:
        return None
    arena = _take_idle(total)
    fresh = arena is None
    if arena is None:
        if allocator_free_bytes() >= total:
            return None
        mapped = fresh_map(total)
        if mapped is None:
            return None
        arena = mapped[0]
    lease = np.frombuffer(arena, dtype=np.uint8)  # every view below holds it; it holds the arena
    weakref.finalize(lease, _retire, arena).atexit = False
    whole = lease.data  # a view of the lease, not of the arena
    out = []
    for offset, length in zip(offsets, lengths):
        view = whole[offset : offset + length]
        tensor = torch.frombuffer(view, dtype=torch.uint8) if length else torch.empty(0, dtype=torch.uint8)
        out.append((tensor, view))
    return HostArena(out, fresh)
