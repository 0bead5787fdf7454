"""CRC-32 of large buffers on helper threads, overlapped with file I/O: pieces of a member are
checksummed on a small shared thread pool while the calling thread reads or writes the next
piece (:func:`~._crc.crc32` releases the GIL), and the pieces' CRCs are joined in order with
:func:`crc32_combine` (zlib's algorithm, which Python does not expose). A load imports this
only for a member large enough to share (:data:`~._crc.PARALLEL_MIN`), or to check a mapped one."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from . import _crc  # its crc32 and PARALLEL_MIN, looked up at each call (tests set them)

__all__ = [
    "OrderedCrc",
    "crc32_combine",
    "crc32_many",
    "crc32_read",
    "pool",
    "share_work",
    "submit",
]

#: Large buffers are split into pieces of this size so both helper threads share one buffer.
PIECE = 4 << 20
#: :func:`crc32_read` reads a file this many bytes at a time into each thread's own buffer.
READ_PIECE = 1 << 20

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
    """x^(2^n) modulo the polynomial for n < 32, computed (``tests/test_crc.py`` checks
    :data:`_X2N` against it)."""
    table = [1 << 30]  # x^1
    for _ in range(31):
        table.append(_multmodp(table[-1], table[-1]))
    return table


#: :func:`_x2n_table`, written out (zlib's ``x2n_table``) so that importing costs nothing.
_X2N = (
    0x40000000, 0x20000000, 0x08000000, 0x00800000, 0x00008000, 0xEDB88320, 0xB1E6B092, 0xA06A2517,
    0xED627DAE, 0x88D14467, 0xD7BBFE6A, 0xEC447F11, 0x8E7EA170, 0x6427800E, 0x4D47BAE0, 0x09FE548F,
    0x83852D0F, 0x30362F1A, 0x7B5A9CC3, 0x31FEC169, 0x9FEC022A, 0x6C8DEDC4, 0x15D6874D, 0x5FDE7A4E,
    0xBAD90E37, 0x2E4E5EEF, 0x4EABA214, 0xA8A472C0, 0x429A969E, 0x148D302A, 0xC40BA6D0, 0xC4E22C3C,
)  # fmt: skip
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
HELPERS = 2
_pool: Any = None
_pool_pid = -1
_pool_lock = threading.Lock()


class _Inline:
    """Runs each task on the caller's thread. The pool where no thread can be started:
    CPython 3.12+ refuses new threads once the interpreter begins to exit, where a pending
    background save is still writing (and must finish, only without helpers)."""

    def submit(self, fn: Any, *args: Any) -> Future:
        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as err:  # noqa: BLE001 - the caller's result() raises it
            done.set_exception(err)
        return done


def _started(executor: ThreadPoolExecutor) -> bool:
    """Start all the executor's threads now: it starts them lazily, in ``submit``, which at
    interpreter exit (CPython 3.12+) fails after queueing the task. Each blocking task below
    occupies a thread, so the next ``submit`` must start another."""
    go = threading.Event()
    try:
        for _ in range(HELPERS):
            executor.submit(go.wait)
        return True
    except RuntimeError:
        executor.shutdown(wait=False, cancel_futures=True)
        return False
    finally:
        go.set()


def pool() -> ThreadPoolExecutor | _Inline:
    """Two helper threads shared by every save and load in the process (re-made after fork,
    whose child inherits the executor but not its threads), all started when it is made, or
    the caller's own thread where none can start (at interpreter exit)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            executor = ThreadPoolExecutor(max_workers=HELPERS, thread_name_prefix="zipsave-crc")
            _pool = executor if _started(executor) else _Inline()
            _pool_pid = os.getpid()
        return _pool


def submit(fn: Any, *args: Any) -> Future:
    """``pool().submit(fn, *args)``, run on the caller's thread once the pool is shut down
    (``concurrent.futures`` refuses work at interpreter exit before queueing it)."""
    try:
        return pool().submit(fn, *args)
    except RuntimeError:
        return _Inline().submit(fn, *args)


def _as_bytes(buf: Any) -> memoryview:
    view = memoryview(buf)
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")


def share_work(count: int, task: Any, *, parallel: bool, scratch: int = 0) -> None:
    """Run ``task(i, buf)`` for every ``i < count`` on this thread and one :func:`pool` helper
    (``parallel``), each taking the next ``i`` in turn and passing a ``scratch``-byte buffer of
    its own. The first error stops both threads and is raised here."""
    claimed = itertools.count()
    failed: list[BaseException] = []

    def work() -> None:
        buf = memoryview(bytearray(scratch))
        for i in claimed:  # next() on a count is atomic under the GIL
            if i >= count or failed:
                return
            try:
                task(i, buf)
            except BaseException as err:
                failed.append(err)
                raise

    helper = submit(work) if parallel and count > 1 else None
    try:
        work()
    finally:
        if helper is not None:
            helper.exception()  # wait; its error, if any, is failed[0] (or the one raised here)
    if failed:
        raise failed[0]


def crc32_many(buffers: Sequence[Any]) -> list[int]:
    """The CRC-32 of each buffer, computed by this thread and one :func:`pool` helper together.

    Every buffer is cut into pieces of :data:`PIECE` bytes and the two threads take pieces in
    turn from one queue, so a few large buffers and many small ones keep both cores busy
    alike (what :class:`OrderedCrc` per buffer does not: it checksums one stream at a time).
    """
    views = [_as_bytes(buf) for buf in buffers]
    pieces = [
        (i, view[start : start + PIECE]) for i, view in enumerate(views) for start in range(0, view.nbytes, PIECE)
    ]
    found = [0] * len(pieces)

    def task(i: int, _scratch: memoryview) -> None:
        found[i] = _crc.crc32(pieces[i][1])

    share_work(len(pieces), task, parallel=sum(view.nbytes for view in views) >= _crc.PARALLEL_MIN)
    crcs = [0] * len(views)
    for (index, piece), piece_crc in zip(pieces, found):
        crcs[index] = crc32_combine(crcs[index], piece_crc, piece.nbytes)
    return crcs


def crc32_read(read_at: Any, spans: Sequence[tuple[int, int]]) -> list[int | None]:
    """The CRC-32 of each ``(offset, length)`` span of a file, read with ``read_at(offset, buf)``
    (returns the bytes read: ``MemberView.read_at``) into one :data:`READ_PIECE` buffer per
    thread, by this thread and one :func:`pool` helper; ``None`` for a span that ends early.

    This checks bytes that are then handed back mapped (``mmap=True``) without mapping them:
    pages read through a mapping count as the process's resident memory until unmapped, and
    touching a mapping of a file another program truncated is a ``SIGBUS``, where a read
    only comes back short. It costs more CPU than checking through the mapping window by
    window (the copy: ``docs/benchmarks.rst``), so that is what Linux does
    (``_tensors._prefault.mapped_crcs``); this is the other systems' way.
    """
    pieces = [
        (i, start, min(READ_PIECE, offset + length - start))
        for i, (offset, length) in enumerate(spans)
        for start in range(offset, offset + length, READ_PIECE)
    ]
    found: list[int | None] = [0] * len(pieces)

    def task(i: int, scratch: memoryview) -> None:
        _, start, length = pieces[i]
        piece = scratch[:length]
        found[i] = _crc.crc32(piece) if read_at(start, piece) == length else None

    share_work(len(pieces), task, parallel=sum(n for _, n in spans) >= _crc.PARALLEL_MIN, scratch=READ_PIECE)
    crcs: list[int | None] = [0] * len(spans)
    for (index, _, length), piece_crc in zip(pieces, found):
        so_far = crcs[index]
        crcs[index] = None if so_far is None or piece_crc is None else crc32_combine(so_far, piece_crc, length)
    return crcs


class OrderedCrc:
    """The CRC-32 of a byte stream fed in order, computed while the caller does I/O.

    Large buffers are cut into pieces; one helper thread from :func:`pool` checksums pieces
    while the caller goes on reading or writing, and :meth:`wait` makes the caller checksum
    whatever is left itself, so on two cores the I/O and the checksum share both. A fed
    buffer must stay alive and unchanged until :meth:`wait` (or :meth:`value`) returns.
    Small buffers are folded in inline.

    With ``inline=True`` every buffer is checksummed by the caller as it is fed, while its
    bytes are still in the CPU's cache: what a read into fresh memory wants. There the
    kernel's copy is bound by memory bandwidth, and a helper thread reading the same bytes
    back from memory beside it slowed a 1.2 GB load by a third (``docs/benchmarks.rst``).
    """

    def __init__(self, *, inline: bool = False) -> None:
        # Runs of the stream in order: [crc, length], or [None, length] for a piece not yet
        # checksummed. Consecutive inline pieces extend one run, so they cost no combines.
        self._runs: list[list[Any]] = []
        self._pending: list[tuple[list[Any], memoryview]] = []  # (run, bytes), claimed in order
        self._next = 0
        self._lock = threading.Lock()
        self._helping = False
        self._helper: Future | None = None
        self._inline = inline
        self.size = 0

    def feed(self, buf: Any) -> None:
        view = _as_bytes(buf)
        n = view.nbytes
        if not n:
            return
        self.size += n
        if n < _crc.PARALLEL_MIN or self._inline:
            last = self._runs[-1] if self._runs else None
            if last is not None and last[0] is not None and last[2]:
                last[0] = _crc.crc32(view, last[0])
                last[1] += n
            else:
                self._runs.append([_crc.crc32(view), n, True])
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
            self._helper = submit(self._drain, True)

    def _drain(self, helper: bool = False) -> None:
        while True:
            with self._lock:
                if self._next == len(self._pending):
                    if helper:
                        self._helping = False
                    return
                run, piece = self._pending[self._next]
                self._next += 1
            run[0] = _crc.crc32(piece)

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
