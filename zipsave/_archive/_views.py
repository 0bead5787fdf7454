"""Random access to one stored member: a read-only, seekable window onto the outer file."""

from __future__ import annotations

import contextlib
import io
import os
import threading
from typing import IO, Any

__all__ = ["MemberView"]


class MemberView(io.RawIOBase):
    """A read-only, seekable window onto one stored member of the outer file.

    Reads go straight to the file at absolute offsets (``os.preadv`` where available), so
    nothing is decompressed, copied twice, or re-read to emulate a seek.
    """

    def __init__(self, fp: IO[bytes], start: int, size: int, lock: threading.Lock, *, owns: bool = False) -> None:
        super().__init__()
        self._fp = fp
        self._owns = owns
        self._start = start
        self._size = size
        self._pos = 0
        self._lock = lock
        fileno = None
        if hasattr(os, "preadv"):
            with contextlib.suppress(AttributeError, OSError, io.UnsupportedOperation):
                fileno = fp.fileno()
        self._fd = fileno

    @property
    def start(self) -> int:
        """Absolute offset of the member's first byte in the outer file."""
        return self._start

    @property
    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise ValueError("negative seek position")
        self._pos = pos
        return pos

    def read_at(self, offset: int, buf: Any) -> int:
        """Fill ``buf`` from member offset ``offset``; return how many bytes were read."""
        view = memoryview(buf).cast("B")
        want = max(0, min(view.nbytes, self._size - offset))
        if want == 0:
            return 0
        view = view[:want]
        done = 0
        while done < want:
            if self._fd is not None:
                n = os.preadv(self._fd, [view[done:]], self._start + offset + done)
            else:
                with self._lock:
                    self._fp.seek(self._start + offset + done)
                    n = self._fp.readinto(view[done:])  # type: ignore[attr-defined]
            if not n:
                break
            done += n
        return done

    def readinto(self, b: Any) -> int:
        n = self.read_at(self._pos, b)
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = max(0, self._size - self._pos)
        buf = bytearray(min(size, max(0, self._size - self._pos)))
        n = self.readinto(buf)
        return bytes(buf[:n])

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        """Close the view; the outer file stays open unless the view owns it (a spool)."""
        if not self.closed and self._owns:
            self._fp.close()
        super().close()
