"""Opt-in tqdm progress bars (``progress=True``) for saves, loads and transfers; silent
unless asked for."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import IO, Any

from .._optional import require
from ..exceptions import describe_path
from ._files import seekable

__all__ = ["check", "counting_reader", "counting_writer", "describe", "make_bar", "transfer_callback"]

_BAR_OPTIONS = {"unit": "B", "unit_scale": True, "unit_divisor": 1024, "leave": False}


def _tqdm_class() -> Any:
    return require("tqdm", extra="progress", feature="`progress=True`").tqdm


def describe(path: Any) -> str:
    """A destination or source as a bar's label: the path, URL or file name."""
    return describe_path(path)


def check(progress: bool) -> None:
    """Fail early, before any byte is written, when a bar is wanted and tqdm is missing."""
    if progress:
        _tqdm_class()


def make_bar(progress: bool, *, total: int | None, desc: str) -> Any:
    """A tqdm bar counting bytes, or ``None`` when ``progress`` is off."""
    if not progress:
        return None
    return _tqdm_class()(total=total, desc=desc, **_BAR_OPTIONS)


def finish(bar: Any) -> None:
    """Close a bar; totals were estimates, so the final count becomes the total."""
    if bar is None:
        return
    if bar.total != bar.n:
        bar.total = bar.n
        bar.refresh()
    bar.close()


@contextlib.contextmanager
def transfer_callback(progress: bool, *, desc: str) -> Iterator[Any]:
    """An fsspec callback that draws an upload/download bar (a no-op one when off)."""
    from fsspec.callbacks import NoOpCallback, TqdmCallback

    if not progress:
        yield NoOpCallback()
        return
    callback = TqdmCallback(tqdm_kwargs={"desc": desc, **_BAR_OPTIONS}, tqdm_cls=_tqdm_class())
    try:
        yield callback
    finally:
        callback.close()


class _CountingWriter(io.RawIOBase):
    """Passes writes through to ``fp`` and advances the bar by each new byte.

    Bytes rewritten after a seek back (the writer patching sizes into a header) are not
    counted twice.
    """

    def __init__(self, fp: IO[bytes], bar: Any) -> None:
        self._fp = fp
        self._bar = bar
        self._pos = fp.tell() if seekable(fp) else 0
        self._high = self._pos

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return seekable(self._fp)

    def write(self, b: Any) -> int:
        written = self._fp.write(b)
        n = memoryview(b).nbytes if written is None else written
        self._pos += n
        if self._pos > self._high:
            self._bar.update(self._pos - self._high)
            self._high = self._pos
        return n

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._pos = self._fp.seek(offset, whence)
        return self._pos

    def flush(self) -> None:
        if not getattr(self._fp, "closed", False):
            self._fp.flush()

    def close(self) -> None:  # the wrapped file belongs to the caller: flushed, left open
        if not self.closed:
            self.flush()
            super().close()  # so the finalizer (CPython 3.13 reports its errors) has nothing left to do


class _CountingReader(io.RawIOBase):
    """Passes reads through to ``fp`` and advances the bar by the bytes read.

    It has no ``fileno``, so readers take the plain ``readinto`` path through it.
    """

    def __init__(self, fp: Any, bar: Any) -> None:
        self._fp = fp
        self._bar = bar
        self.name = getattr(fp, "name", None)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self._fp.readinto(b) or 0
        self._bar.update(n)
        return n

    def read(self, size: int = -1) -> bytes:
        data = self._fp.read(size)
        self._bar.update(len(data))
        return data

    def tell(self) -> int:
        return self._fp.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._fp.seek(offset, whence)

    def close(self) -> None:  # the wrapped file belongs to the caller
        pass


def _size(fp: Any) -> int | None:
    try:
        here = fp.tell()
        end = fp.seek(0, io.SEEK_END)
        fp.seek(here)
        return end - here
    except (AttributeError, OSError, ValueError):
        return None


@contextlib.contextmanager
def counting_writer(fp: IO[bytes], progress: bool, *, total: int | None, desc: str) -> Iterator[IO[bytes]]:
    """``fp`` itself when ``progress`` is off; else ``fp`` wrapped to drive a bar."""
    if not progress:
        yield fp
        return
    bar = make_bar(True, total=total, desc=desc)
    try:
        yield _CountingWriter(fp, bar)  # type: ignore[misc]
    finally:
        finish(bar)


def counting_reader(fp: IO[bytes], progress: bool, *, desc: str, stack: contextlib.ExitStack) -> IO[bytes]:
    """``fp`` itself when ``progress`` is off; else ``fp`` wrapped to drive a bar that
    ``stack`` closes."""
    if not progress:
        return fp
    bar = make_bar(True, total=_size(fp), desc=desc)
    stack.callback(finish, bar)
    return _CountingReader(fp, bar)  # type: ignore[return-value]
