"""CRC-32 (zip's checksum) of large buffers on helper threads, overlapped with file I/O.

``zlib.crc32`` releases the GIL, so pieces of a member can be checksummed on a small shared
thread pool while the calling thread reads or writes the next piece; the pieces' CRCs are
joined in order with :func:`crc32_combine` (zlib's algorithm, which Python does not expose).
"""

from __future__ import annotations

import os
import threading
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["OrderedCrc", "crc32_combine", "pool"]

#: Buffers smaller than this are checksummed inline: a thread hand-off costs more.
PARALLEL_MIN = 1 << 20
#: Large buffers are split into pieces of this size so both helper threads share one buffer.
PIECE = 4 << 20

_POLY = 0xEDB88320


def _multmodp(a: int, b: int) -> int:
    """Multiply ``a`` and ``b`` modulo the CRC-32 polynomial (reflected bit order)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _x2n_table() -> list[int]:
    table = [1 << 30]  # x^1
    for _ in range(31):
        table.append(_multmodp(table[-1], table[-1]))
    return table


_X2N = _x2n_table()
_SHIFT_CACHE: dict[int, int] = {}


def _x8nmodp(n: int) -> int:
    """x^(8n) modulo the polynomial: shifts a CRC past ``n`` zero bytes."""
    cached = _SHIFT_CACHE.get(n)
    if cached is not None:
        return cached
    p = 1 << 31  # x^0
    k = 3
    m = n
    while m:
        if m & 1:
            p = _multmodp(_X2N[k & 31], p)
        m >>= 1
        k += 1
    if len(_SHIFT_CACHE) < 256:
        _SHIFT_CACHE[n] = p
    return p


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of ``A + B`` from ``crc32(A)``, ``crc32(B)`` and ``len(B)``."""
    if len2 <= 0:
        return crc1
    if crc1 == 0:  # multiplying 0 gives 0, whatever A was
        return crc2
    return _multmodp(_x8nmodp(len2), crc1) ^ crc2


# -- the shared pool -------------------------------------------------------------------------
_pool: ThreadPoolExecutor | None = None
_pool_pid = -1
_pool_lock = threading.Lock()


def pool() -> ThreadPoolExecutor:
    """Two helper threads shared by every save and load in the process (re-made after fork,
    whose child inherits the executor but not its threads)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="zipsave-crc")
            _pool_pid = os.getpid()
        return _pool


class OrderedCrc:
    """The CRC-32 of a byte stream fed in order, computed while the caller does I/O.

    Large buffers are cut into pieces; one helper thread from :func:`pool` checksums pieces
    while the caller goes on reading or writing, and :meth:`wait` makes the caller checksum
    whatever is left itself, so on two cores the I/O and the checksum share both. A fed
    buffer must stay alive and unchanged until :meth:`wait` (or :meth:`value`) returns.
    Small buffers are folded in inline.
    """

    def __init__(self) -> None:
        # Runs of the stream in order: [crc, length], or [None, length] for a piece not yet
        # checksummed. Consecutive inline pieces extend one run, so they cost no combines.
        self._runs: list[list[Any]] = []
        self._pending: list[tuple[list[Any], memoryview]] = []  # (run, bytes), claimed in order
        self._next = 0
        self._lock = threading.Lock()
        self._helping = False
        self._helper: Future | None = None
        self.size = 0

    def feed(self, buf: Any) -> None:
        view = memoryview(buf)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        n = view.nbytes
        if not n:
            return
        self.size += n
        if n < PARALLEL_MIN:
            last = self._runs[-1] if self._runs else None
            if last is not None and last[0] is not None and last[2]:
                last[0] = zlib.crc32(view, last[0])
                last[1] += n
            else:
                self._runs.append([zlib.crc32(view), n, True])
            return
        with self._lock:
            for start in range(0, n, PIECE):
                piece = view[start : start + PIECE]
                run = [None, piece.nbytes, False]
                self._runs.append(run)
                self._pending.append((run, piece))
            start_helper = not self._helping
            self._helping = True
        if start_helper:
            self._helper = pool().submit(self._drain, True)

    def _drain(self, helper: bool = False) -> None:
        while True:
            with self._lock:
                if self._next == len(self._pending):
                    if helper:
                        self._helping = False
                    return
                run, piece = self._pending[self._next]
                self._next += 1
            run[0] = zlib.crc32(piece)

    def wait(self) -> None:
        """Checksum what is left on this thread, then wait for the helper's last piece."""
        self._drain()
        if self._helper is not None:
            self._helper.result()
            self._helper = None
        with self._lock:
            self._pending = self._pending[self._next :]
            self._next = 0

    def value(self) -> int:
        """The CRC-32 of everything fed."""
        self.wait()
        crc = 0
        for piece_crc, length, _inline in self._runs:
            crc = crc32_combine(crc, piece_crc, length)
        self._runs = [[crc, self.size, False]] if self.size else []
        return crc

    def cancel(self) -> None:
        """Drop pieces not started (after an error); waits for the helper's running piece,
        so no thread touches a fed buffer after this returns."""
        with self._lock:
            self._next = len(self._pending)
        if self._helper is not None:
            self._helper.exception()  # wait; an error of its own changes nothing now
            self._helper = None
        self._runs, self._pending, self._next = [], [], 0
