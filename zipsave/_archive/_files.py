"""Local files: atomic, durable replacement of an archive on save, SB3's ``.zip`` suffix rule
on open, and the Linux libc calls that Python's ``os`` and ``mmap`` modules lack
(``sync_file_range``, ``madvise(MADV_POPULATE_WRITE)`` on torch's memory), loaded once through
ctypes."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import IO, Any

from ..exceptions import ArchiveFormatError, ArchiveNotFoundError

__all__ = ["atomic_output", "libc_function", "open_input", "seekable", "with_suffix"]

_umask_lock = threading.Lock()


@functools.cache
def libc_function(name: str, argtypes: tuple[Any, ...]) -> Any:
    """The C library's ``name`` with ``argtypes`` and an ``int`` result, or ``None`` off Linux
    or where the C library lacks it. ctypes releases the GIL for the call."""
    if not sys.platform.startswith("linux"):
        return None
    try:  # the process's own symbols include the C library's: no ldconfig run (find_library)
        func = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        try:
            from ctypes.util import find_library

            func = getattr(ctypes.CDLL(find_library("c") or None, use_errno=True), name)
        except (OSError, AttributeError):
            return None
    func.argtypes = list(argtypes)
    func.restype = ctypes.c_int
    return func


def _current_umask() -> int:
    """The process umask, read without changing it where Linux allows (``os.umask`` can only
    be read by setting it, which races with other threads creating files)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    with _umask_lock:
        umask = os.umask(0o022)
        os.umask(umask)
    return umask


@contextlib.contextmanager
def atomic_output(path: str, *, durable: bool = True) -> Iterator[IO[bytes]]:
    """Yield a temporary file beside ``path``; on success it replaces ``path`` atomically.

    A crash or an exception at any point leaves the previous file at ``path`` untouched and
    removes the temporary file (a SIGKILL may leave a ``.zipsave-tmp`` file behind, never a
    partial archive at ``path``). With ``durable``, the file's data is on disk before the
    rename and the rename is on disk before this returns; without it, both are left to the OS
    (a crash of the process still never leaves a partial archive; a power cut may).

    Two costs are kept off the caller's time where Linux allows: the disk starts writing
    each few MiB as soon as they are written (``sync_file_range``), so the final ``fsync``
    waits only for the tail; and the previous archive's blocks are freed on a helper thread
    (the rename would otherwise free them inline).
    """
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".zipsave-tmp", dir=folder)
    previous = -1
    try:
        with os.fdopen(fd, "wb") as f:
            yield _WriteBehind(f) if durable and _sync_file_range() is not None else f  # type: ignore[misc]
            f.flush()
            if durable:
                os.fsync(f.fileno())
        try:
            mode = os.stat(path).st_mode & 0o777
        except FileNotFoundError:
            mode = 0o666 & ~_current_umask()
        os.chmod(tmp, mode)
        with contextlib.suppress(OSError):
            previous = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if previous >= 0:
            os.close(previous)
        raise
    if previous >= 0:  # the last reference to the replaced file: freeing it takes a while
        threading.Thread(target=os.close, args=(previous,), name="zipsave-release", daemon=True).start()
    if durable and hasattr(os, "O_DIRECTORY"):
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


_KICK_EVERY = 8 << 20
_PIECE = 32 << 20  # a larger write is passed on in pieces, so the disk starts on the first ones
_SYNC_FILE_RANGE_WRITE = 2


def _sync_file_range() -> Any:
    return libc_function("sync_file_range", (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint))


class _WriteBehind:
    """A file whose dirty pages the kernel starts writing to disk every ``_KICK_EVERY`` bytes
    written (asynchronously: ``SYNC_FILE_RANGE_WRITE`` waits for nothing), so the disk works
    while the archive is still being produced. Everything else is the wrapped file's.

    Only the range written since the last kick is kicked, and a large buffer (a replay
    buffer's array: gigabytes in one call) is written ``_PIECE`` bytes at a time with a kick
    after each. Kicking the whole file after a whole 3 GB write started the disk only at the
    end and made the kernel walk every page of the file again: a 6 GB buffer's save took
    1.3-1.6x a plain write + fsync, against 0.9-1.1x this way (``docs/benchmarks.rst``)."""

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self._fd = f.fileno()
        self._unkicked = 0
        self._kicked_to = 0

    def write(self, data: Any) -> int:
        view = memoryview(data)
        if view.nbytes <= _PIECE:
            return self._write(view)
        view = view.cast("B") if view.ndim != 1 or view.format != "B" else view
        for start in range(0, view.nbytes, _PIECE):
            self._write(view[start : start + _PIECE])
        return view.nbytes

    def _write(self, view: memoryview) -> int:
        written = self._f.write(view)
        self._unkicked += view.nbytes
        if self._unkicked >= _KICK_EVERY:
            self._unkicked = 0
            self._f.flush()
            end = self._f.tell()
            if end > self._kicked_to:  # a seek back to patch a header writes behind the kicked range
                # a failure only loses the head start
                _sync_file_range()(self._fd, self._kicked_to, end - self._kicked_to, _SYNC_FILE_RANGE_WRITE)
                self._kicked_to = end
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


# -- reading -----------------------------------------------------------------------------------
def open_input(path: str) -> IO[bytes]:
    """Open ``path`` for reading; a missing file tries ``path + ".zip"`` (SB3's rule)."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        if not path.endswith(".zip"):
            try:
                return open(path + ".zip", "rb")
            except FileNotFoundError:
                pass
        raise ArchiveNotFoundError(
            "no such file (also tried with a `.zip` suffix).",
            archive=path,
            errno=errno.ENOENT,
            hint="Check the path, or pass an open binary file object.",
        ) from None
    except IsADirectoryError:
        raise ArchiveFormatError("is a directory, not a zip archive.", archive=path) from None


def with_suffix(path: str) -> str:
    """SB3's rule on save: a path without a suffix gets ``.zip``."""
    return path if os.path.splitext(path)[1] else path + ".zip"


def seekable(fp: Any) -> bool:
    """Whether a file object supports random access (zip reading needs it)."""
    try:
        return bool(fp.seekable())
    except (AttributeError, OSError, ValueError):
        return False
