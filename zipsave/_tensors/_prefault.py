"""Fresh host memory made resident on a helper thread, ahead of the reads that fill it.

A copying load reads every storage record into a fresh ``torch.empty`` buffer. The kernel
backs fresh memory one 4 KiB page at a time as the read first touches it, and on the benchmark
machine (a virtual machine) those page faults, not the copy, were most of a load's time
(``docs/benchmarks.rst``). Linux 5.14 and later populate a whole range in one call
(``madvise(MADV_POPULATE_WRITE)``), which is cheaper than faulting page by page and, run on a
helper thread for the next piece while this thread reads the current one, overlaps with the
copy. The pages are the buffers' own: nothing else is allocated, and the tensors stay
ordinary independent tensors.

This is the fallback of :mod:`._arena`, used where huge pages are not free (populating huge
pages from a helper thread measured slow). Where ``madvise`` cannot populate (another OS, an
older kernel), :class:`Prefaulter` does nothing and the reads fault as before.
"""

from __future__ import annotations

import ctypes
import mmap as _mmap
import sys
import threading
from collections.abc import Sequence
from typing import Any

from .._archive import crc32, crc32_combine, crc32_read, libc_function, share_work

__all__ = [
    "PREFAULT_MIN",
    "Prefaulter",
    "mapped_crcs",
    "no_huge_pages",
    "populate",
    "populate_read",
    "stored_crc",
]

#: Buffers (all of one member together) smaller than this are left to fault as they are read.
#: At 2 MiB a first load of a 1e6-parameter model (members of 4 and 8 MB) took 1.7 ms less
#: than at 8 MiB (median of ten paired fresh processes on the benchmark machine, 1 MiB no
#: better): below that, starting the helper thread costs about what it saves.
PREFAULT_MIN = 2 << 20

_MADV_POPULATE_READ = 22  # linux/mman.h, since 5.14
_MADV_POPULATE_WRITE = 23
_MADV_NOHUGEPAGE = 15
_PAGE = 4096
#: A mapped span is checked this many bytes at a time by each of two threads (with the
#: pages of one window each, the check's peak resident memory).
CHECK_WINDOW = 8 << 20
#: Whether mapped bytes are checked in place (else read with ``pread``): where unmapping
#: clean pages of a private file mapping is known to drop them (Linux).
CHECK_IN_PLACE = sys.platform.startswith("linux") and hasattr(_mmap, "MADV_DONTNEED")


def _madvise() -> Any:
    return libc_function("madvise", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int))


def no_huge_pages(address: int, length: int) -> None:
    """Advise the whole pages inside ``[address, address + length)`` against transparent huge
    pages (``MADV_NOHUGEPAGE``), so faulting them in never compacts memory. For memory zipsave
    did not map itself (a live array it reads into): numpy advises large arrays for huge pages,
    and with THP ``defrag=madvise`` on a fragmented host each huge-page fault compacts memory
    synchronously. Pages already resident stay as they are. Does nothing where ``madvise`` is
    not available."""
    madvise = _madvise()
    if madvise is None:
        return
    start = (address + _PAGE - 1) & ~(_PAGE - 1)
    end = (address + length) & ~(_PAGE - 1)
    if end > start:
        madvise(start, end - start, _MADV_NOHUGEPAGE)


def populate(address: int, length: int) -> bool:
    """Make the whole pages inside ``[address, address + length)`` resident and writable.

    Returns ``False`` where the OS cannot (nothing is changed then). The call releases the GIL.
    """
    madvise = _madvise()
    if madvise is None:
        return False
    start = (address + _PAGE - 1) & ~(_PAGE - 1)
    end = (address + length) & ~(_PAGE - 1)
    if end <= start:
        return True
    return madvise(start, end - start, _MADV_POPULATE_WRITE) == 0


def populate_read(mapped: Any, start: int, length: int) -> None:
    """Map ``[start, start + length)`` of a file mapping's pages into this process in one call
    (``MADV_POPULATE_READ``, Linux 5.14+), cheaper than a fault per page; elsewhere the reads
    fault them in as they go."""
    if not sys.platform.startswith("linux"):  # the advice's number means other things elsewhere
        return
    first = start - start % _mmap.PAGESIZE
    try:
        mapped.madvise(_MADV_POPULATE_READ, first, start + length - first)
    except (OSError, ValueError, AttributeError):
        pass


class Prefaulter:
    """Populates ``pieces`` (``(address, length)`` of fresh host memory) in order on a helper
    thread; :meth:`wait` blocks until piece *i* is done (or populating stopped), so a reader
    filling the pieces in the same order finds each one resident.

    A failed ``madvise`` (an OS without it) stops the helper and releases every waiter: the
    reads then fault the pages themselves, as without a prefaulter.
    """

    def __init__(self, pieces: Sequence[tuple[int, int]]) -> None:
        self._pieces = list(pieces)
        self._done = 0
        self._stopped = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        if self._pieces and sum(length for _, length in self._pieces) >= PREFAULT_MIN and _madvise() is not None:
            self._thread = threading.Thread(target=self._run, name="zipsave-prefault", daemon=True)
            self._thread.start()
        else:
            self._stopped = True

    def _run(self) -> None:
        for address, length in self._pieces:
            if self._stopped:
                break
            ok = populate(address, length)
            with self._cond:
                if not ok:
                    self._stopped = True
                else:
                    self._done += 1
                self._cond.notify_all()
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def wait(self, index: int) -> None:
        """Return once piece ``index`` is populated, or populating has stopped."""
        with self._cond:
            while self._done <= index and not self._stopped:
                self._cond.wait()

    def close(self) -> None:
        """Stop after the running piece and wait for the helper (no thread touches the
        buffers after this returns)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def mapped_crcs(view: Any, mapped: Any, base: int, spans: Sequence[tuple[int, int]]) -> list[int | None]:
    """The CRC-32 of each ``(offset, length)`` span of the member ``view``, which ``mapped``
    (a fresh private map of its file, nothing written to it yet) holds from ``base``;
    ``None`` for a span past the member's end.

    On Linux the spans are checked in place, :data:`CHECK_WINDOW` bytes at a time, by this
    thread and a helper: each maps its window's pages in one call, checksums them and unmaps
    them again (``MADV_DONTNEED``: nothing was written, so a later touch maps the same file
    bytes back), so the check's peak resident memory is about two windows, not the member;
    at the end the whole mapping is unmapped once more (a fault also maps the pages around
    it, which may belong to a window already done, or to no span). That took less CPU than
    reading the bytes into a small buffer (``docs/benchmarks.rst``).
    Elsewhere the bytes are read with ``pread`` (:func:`~zipsave._archive.crc32_read`)."""
    if not CHECK_IN_PLACE or any(offset + length > view.size for offset, length in spans):
        return crc32_read(view.read_at, spans)
    pieces = [
        (i, start, min(CHECK_WINDOW, base + offset + length - start))
        for i, (offset, length) in enumerate(spans)
        for start in range(base + offset, base + offset + length, CHECK_WINDOW)
    ]
    found = [0] * len(pieces)
    whole = memoryview(mapped)

    def task(i: int, _scratch: memoryview) -> None:
        _, start, length = pieces[i]
        populate_read(mapped, start, length)
        window = whole[start : start + length]
        try:
            found[i] = crc32(window)
        finally:
            window.release()
        _unmap(mapped, start, length)

    try:
        share_work(len(pieces), task, parallel=sum(n for _, n in spans) >= 1 << 20)
    finally:
        whole.release()
        _unmap(mapped, 0, len(mapped))  # what a fault mapped around a window (the mapping is fresh)
    crcs: list[int | None] = [0] * len(spans)
    for (index, _, length), piece_crc in zip(pieces, found):
        crcs[index] = crc32_combine(crcs[index] or 0, piece_crc, length)
    return crcs


def stored_crc(view: Any) -> int | None:
    """The CRC-32 of a whole member as stored (``view``: a :class:`~zipsave._archive.MemberView`),
    read from the file without copying it anywhere the caller sees; ``None`` if it ends early.

    For a check that must pass before any byte is read into the caller's live memory. Where
    the member's file can be mapped, the check runs on a fresh private mapping (which
    :func:`mapped_crcs` leaves with none of its pages resident); elsewhere it is read with
    ``pread`` into a small buffer per thread (:func:`~zipsave._archive.crc32_read`)."""
    fd = getattr(view, "_fd", None)
    if not view.size:
        return 0
    if fd is not None:
        first = view.start - view.start % _mmap.ALLOCATIONGRANULARITY
        try:
            mapped = _mmap.mmap(fd, view.start + view.size - first, access=_mmap.ACCESS_COPY, offset=first)
        except (OSError, ValueError):  # a file shorter than the member's span, a pipe
            mapped = None
        if mapped is not None:
            try:
                return mapped_crcs(view, mapped, view.start - first, [(0, view.size)])[0]
            finally:
                mapped.close()
    return crc32_read(view.read_at, [(0, view.size)])[0]


def _unmap(mapped: Any, start: int, length: int) -> None:
    """Drop the pages of ``[start, start + length)`` from a private file mapping nothing was
    written to (a later touch maps the same file bytes back)."""
    first = start - start % _mmap.PAGESIZE
    last = min(len(mapped), -(-(start + length) // _mmap.PAGESIZE) * _mmap.PAGESIZE)
    if last > first:
        try:
            mapped.madvise(_mmap.MADV_DONTNEED, first, last - first)
        except (OSError, ValueError):
            pass
