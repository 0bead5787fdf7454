"""CRC-32, zip's checksum, of one buffer on the caller's thread (the threaded checksums of large
buffers are :mod:`._crc_pool`'s).

:func:`crc32` is ISA-L's (``isal.isal_zlib.crc32``, 3-6x zlib's speed on the benchmark
machine, see ``docs/benchmarks.rst``) where the ``isal`` package is installed, else
``zlib.crc32``; both give the same value. ISA-L is imported for the first buffer of
:data:`ISAL_BUFFER` bytes, or once a process has checksummed :data:`ISAL_AFTER` bytes: importing
it costs about 0.9 ms, what zlib takes for some 4 MiB on the benchmark machine, so a small
archive (most saved agents) never pays for it and a large one switches at its first large
tensor. Both release the GIL, which is what lets :mod:`._crc_pool` checksum pieces of a member on
helper threads while the calling thread reads or writes the next piece.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import zlib
from typing import Any

__all__ = ["ISAL_AFTER", "ISAL_BUFFER", "PARALLEL_MIN", "backend", "crc32"]

#: ``ZIPSAVE_CRC=zlib`` forces the fallback (tests, and benchmarks comparing the two).
_FORCE_ZLIB = os.environ.get("ZIPSAVE_CRC", "") == "zlib"
#: A buffer this large is checksummed by ISA-L, imported for it (see above).
ISAL_BUFFER = 512 << 10
#: Bytes checksummed with zlib in smaller buffers before ISA-L is imported: about 0.5 ms of
#: zlib on the benchmark machine, half what importing ISA-L's four modules costs.
ISAL_AFTER = 2 << 20

#: Buffers smaller than this are checksummed inline: a thread hand-off costs more
#: (:mod:`._crc_pool` shares larger ones between threads).
PARALLEL_MIN = 1 << 20

_isal_crc32: Any = None  # ISA-L's function, once imported
_isal_missing = _FORCE_ZLIB  # True once its import failed (or zlib is forced)
_zlib_bytes = 0  # what went through zlib so far (approximate across threads: it only decides when)
_switch_lock = threading.Lock()


def crc32(data: Any, value: int = 0) -> int:
    """CRC-32 of ``data`` (a bytes-like object) continuing ``value``: ``zlib.crc32``'s
    signature and values, computed by ISA-L from the first large buffer on (see above)."""
    global _zlib_bytes
    fast = _isal_crc32
    if fast is not None:
        return fast(data, value)
    if not _isal_missing:
        size = data.nbytes if type(data) is memoryview else len(data)
        _zlib_bytes += size
        if (size >= ISAL_BUFFER or _zlib_bytes >= ISAL_AFTER) and _use_isal():
            return _isal_crc32(data, value)
    return zlib.crc32(data, value)


def _use_isal() -> bool:
    """Import ISA-L's CRC-32 for every later call; False where it has no wheel."""
    global _isal_crc32, _isal_missing
    with _switch_lock:
        if _isal_crc32 is None and not _isal_missing:
            try:  # a dependency where it has wheels; anywhere else zlib gives the same values, slower
                from isal.isal_zlib import crc32 as fast
            except ImportError:  # pragma: no cover - no wheel for this platform
                _isal_missing = True
            else:
                _isal_crc32 = fast
    return _isal_crc32 is not None


def backend() -> str:
    """Which implementation checksums large buffers: ``"isal"`` or ``"zlib"``."""
    return "isal" if not _isal_missing and importlib.util.find_spec("isal") is not None else "zlib"
