"""The one rule for what a ``path`` means: an open binary file object (never closed), an
fsspec URL (``s3://...``), or a local path (``file://`` accepted; ``.zip`` appended on save and
tried on load, as SB3 does)."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import IO, Any

from .. import _archive  # its fsspec transfers (_remote), imported only for a URL
from ..exceptions import ArchiveFormatError, StorageError, UsageError
from ._files import atomic_output, open_input, seekable, with_suffix

__all__ = ["binary_file", "destination_key", "is_url", "open_output", "open_source"]

_SPOOL_CHUNK = 16 << 20


def is_url(path: Any) -> bool:
    """An fsspec URL other than ``file://`` (which is a local path)."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def _local(path: Any) -> str:
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise UsageError(
            f"path must be a file path (str or os.PathLike), a URL or an open binary file object, "
            f"got {type(path).__name__} {path!r:.80}."
        )
    if isinstance(path, bytes) and (path[:2] == b"PK" or b"\0" in path):  # "embedded null byte", said so
        raise UsageError(
            f"path is {len(path)} bytes of data{', a zip archive' if path[:2] == b'PK' else ''}, not a file name: "
            "to read an archive held in memory, pass `io.BytesIO(data)` (an `io.BytesIO()` to save into one)."
        )
    text = os.fsdecode(os.fspath(path)).removeprefix("file://")
    if not text:  # `save(model, "")` would write a hidden `.zip` into the working directory
        raise ValueError("path is empty: give a file name such as `model.zip`.")
    return text


def binary_file(fileobj: Any, mode: str) -> Any:
    """``fileobj``, a file object an archive is read from or written to, if it is open in binary
    mode: a text one takes and gives ``str``, which would read as no zip at all."""
    if isinstance(fileobj, io.TextIOBase):
        name = getattr(fileobj, "name", None)
        label = name if isinstance(name, str) else f"<{type(fileobj).__name__}>"
        opened = getattr(fileobj, "mode", None)
        raise UsageError(
            f"`{label}` is open in text mode{f' (mode {opened!r})' if isinstance(opened, str) else ''}, and an "
            f"archive is bytes: open it in binary mode, `open(path, {mode!r})`, or pass the path itself."
        )
    return fileobj


def destination_key(path: Any) -> tuple[str, Any]:
    """What makes two saves go to the same place: the file object, the URL, or the absolute
    path with the ``.zip`` suffix rule applied."""
    if hasattr(path, "write"):
        return ("file", id(binary_file(path, "wb")))
    if is_url(path):
        return ("url", with_suffix(_file_name(path)))
    return ("path", os.path.abspath(with_suffix(_file_name(_local(path)))))


def _file_name(text: str) -> str:
    """``text`` if it names a file to write: ``runs/``, ``.`` and ``..`` name a folder, where the
    ``.zip`` suffix rule made a hidden ``runs/.zip`` (``..zip``, ``...zip``)."""
    if os.path.basename(text) in ("", ".", ".."):
        raise UsageError(
            f"names a folder, not the archive's file: give a file name in it, such as `{text.rstrip('/')}/model.zip`.",
            archive=text,
        )
    return text


def _output_path(path: Any) -> str:
    text = with_suffix(_file_name(_local(path)))
    if os.path.isdir(text):
        raise ArchiveFormatError("is a directory; give a file name such as `model.zip`.", archive=text)
    folder = os.path.dirname(os.path.abspath(text))
    parent = folder
    while parent and not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        # makedirs would say only "File exists", naming neither the file nor the cause.
        raise StorageError(
            f"`{parent}` is a file, not a folder" + (f", so `{folder}` cannot be made." if parent != folder else "."),
            archive=text,
            errno=errno.ENOTDIR,
            hint="Give a path whose folders are folders.",
        )
    os.makedirs(folder, exist_ok=True)
    return text


@contextlib.contextmanager
def open_output(
    path: Any, *, storage_options: dict | None = None, progress: bool = False, durable: bool = True
) -> Iterator[IO[bytes]]:
    """Yield where an archive is written. Paths and URLs are replaced atomically when the block
    exits cleanly (an exception leaves the previous archive whole), a local path durably
    unless ``durable`` is false; a file object is used as it is."""
    if hasattr(path, "write"):
        yield binary_file(path, "wb")
    elif is_url(path):
        with _archive.remote_output(_file_name(path), storage_options=storage_options, progress=progress) as fp:
            yield fp
    else:
        with atomic_output(_output_path(path), durable=durable) as fp:
            yield fp


@contextlib.contextmanager
def open_source(
    path: Any, *, storage_options: dict | None = None, progress: bool = False
) -> Iterator[tuple[IO[bytes], str]]:
    """Yield ``(seekable binary file, name for messages)`` for an archive to read. A
    non-seekable file object or remote stream is spooled to a temporary file first."""
    if hasattr(path, "read"):
        binary_file(path, "rb")
        name = getattr(path, "name", None)
        label = name if isinstance(name, str) else f"<{type(path).__name__}>"
        if seekable(path) and hasattr(path, "seek"):
            yield path, label
            return
        with tempfile.TemporaryFile() as spool:
            shutil.copyfileobj(path, spool, _SPOOL_CHUNK)
            spool.seek(0)
            yield spool, label
        return
    if is_url(path):
        with _archive.remote_input(path, storage_options=storage_options, progress=progress) as fp:
            yield fp, path
        return
    fp = open_input(_local(path))
    with fp:
        yield fp, fp.name
