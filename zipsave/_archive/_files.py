"""Local files: atomic, durable replacement of an archive on save, and SB3's ``.zip`` suffix rule
on open."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator
from typing import IO, Any

from ..exceptions import ArchiveFormatError, ZipsaveError

__all__ = ["atomic_output", "open_input", "seekable", "with_suffix"]

_umask_lock = threading.Lock()


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
    partial archive at ``path``).
    """
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".zipsave-tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        try:
            mode = os.stat(path).st_mode & 0o777
        except FileNotFoundError:
            mode = 0o666 & ~_current_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable and hasattr(os, "O_DIRECTORY"):
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


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
        raise ZipsaveError(
            "no such file (also tried with a `.zip` suffix).",
            archive=path,
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
