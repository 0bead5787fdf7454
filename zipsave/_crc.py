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
PIECE = 8 << 20

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
    """The CRC-32 of a byte stream fed in order, computed off the calling thread.

    ``feed(buf)`` returns at once for large buffers: their pieces are checksummed by the
    pool. The buffer must stay alive and unchanged until :meth:`wait` (or :meth:`value`)
    returns. Small buffers are folded in inline.
    """

    def __init__(self) -> None:
        # Runs of the stream: (crc or Future of it, length). Consecutive inline pieces extend
        # the last run instead of adding one, so many small pieces cost no combines.
        self._runs: list[list[Any]] = []
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
            if last is not None and not isinstance(last[0], Future):
                last[0] = zlib.crc32(view, last[0])
                last[1] += n
            else:
                self._runs.append([zlib.crc32(view), n])
            return
        executor = pool()
        for start in range(0, n, PIECE):
            piece = view[start : start + PIECE]
            self._runs.append([executor.submit(zlib.crc32, piece), piece.nbytes])

    def wait(self) -> None:
        """Block until every piece fed so far has been checksummed."""
        for run in self._runs:
            if isinstance(run[0], Future):
                run[0] = run[0].result()

    def value(self) -> int:
        """The CRC-32 of everything fed (waits for the helpers)."""
        self.wait()
        crc = 0
        for piece_crc, length in self._runs:
            crc = crc32_combine(crc, piece_crc, length)
        self._runs = [[crc, self.size]] if self.size else []
        return crc

    def cancel(self) -> None:
        """Drop pending pieces (after an error); waits for running ones to finish with their buffers."""
        for run in self._runs:
            if isinstance(run[0], Future) and not run[0].cancel():
                try:
                    run[0].result()
                except Exception:  # noqa: BLE001 - the caller is already handling an error
                    pass
        self._runs = []
