"""Where a checkpoint directory lives: a local folder or an fsspec URL, behind the few file
operations the manager needs (list, read, durable atomic write, delete)."""

from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import tempfile
import uuid
from typing import IO, Any, Callable, TypeVar

from .._optional import require
from ..exceptions import StorageError, ZipsaveError

__all__ = ["LocalStore", "RemoteStore", "Store", "open_store"]

#: Object stores whose single PUT creates the object whole or not at all.
_ATOMIC_PUT = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "oci"})


class Store:
    """The operations on one checkpoint directory. ``name`` arguments are plain file names
    inside it (no folders)."""

    location: str  # what the user passed, for messages
    storage_options: dict[str, Any] | None = None

    def target(self, name: str) -> str:
        """The path or URL ``zipsave.save``/``load`` use for ``name``."""
        raise NotImplementedError

    def create(self) -> None:
        """Make the directory exist (a no-op where folders are implicit)."""
        raise NotImplementedError

    def names(self) -> list[str]:
        raise NotImplementedError

    def read(self, name: str) -> bytes | None:
        """The file's bytes, or ``None`` when it does not exist."""
        raise NotImplementedError

    def write(self, name: str, payload: bytes) -> None:
        """Replace ``name`` with ``payload`` atomically and durably."""
        raise NotImplementedError

    def delete(self, name: str) -> None:
        raise NotImplementedError

    def rename(self, name: str, new_name: str) -> None:
        """Move ``name`` to ``new_name`` inside the directory (replacing it)."""
        raise NotImplementedError

    def open(self, name: str) -> IO[bytes]:
        """``name`` opened for reading (a seekable binary file object)."""
        raise NotImplementedError

    def size(self, name: str) -> int:
        raise NotImplementedError

    @property
    def is_local(self) -> bool:
        return isinstance(self, LocalStore)


class LocalStore(Store):
    def __init__(self, folder: str) -> None:
        self.location = folder
        self.folder = os.path.abspath(folder)

    def target(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def exists(self) -> bool:
        return os.path.isdir(self.folder)

    def create(self) -> None:
        os.makedirs(self.folder, exist_ok=True)

    def names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return []

    def read(self, name: str) -> bytes | None:
        try:
            with open(self.target(name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write(self, name: str, payload: bytes) -> None:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".zipsave-tmp", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.target(name))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        self.sync()

    def sync(self) -> None:
        """Make renames and deletions in the folder durable."""
        if hasattr(os, "O_DIRECTORY"):
            fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.target(name))

    def rename(self, name: str, new_name: str) -> None:
        os.replace(self.target(name), self.target(new_name))
        self.sync()

    def open(self, name: str) -> IO[bytes]:
        return open(self.target(name), "rb")

    def size(self, name: str) -> int:
        return os.stat(self.target(name)).st_size


_M = TypeVar("_M", bound=Callable[..., Any])


def _reached(method: _M) -> _M:
    """What the filesystem raises beyond ``OSError`` (botocore's ``NoCredentialsError``, a refused
    request) as a :class:`StorageError` naming the directory, not a bare third-party exception."""

    @functools.wraps(method)
    def call(self: RemoteStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (OSError, ZipsaveError):
            raise
        except Exception as err:
            raise StorageError(
                f"checkpoint directory `{self.location}` could not be reached ({type(err).__name__}: {err}).",
                hint="Check the URL and the credentials or `storage_options` it needs.",
            ) from err

    return call  # type: ignore[return-value]


class RemoteStore(Store):
    def __init__(self, url: str, storage_options: dict[str, Any] | None) -> None:
        fsspec = require("fsspec", extra="remote", feature=f"the checkpoint directory `{url}`")
        self.location = url
        self.storage_options = storage_options
        self.fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        self.path = path.rstrip("/")
        self.url = url.rstrip("/")
        protocol = self.fs.protocol
        self.atomic_put = bool(({protocol} if isinstance(protocol, str) else set(protocol)) & _ATOMIC_PUT)

    def target(self, name: str) -> str:
        return f"{self.url}/{name}"

    def _path(self, name: str) -> str:
        return posixpath.join(self.path, name)

    @_reached
    def exists(self) -> bool:
        self._refresh()
        return bool(self.fs.exists(self.path))

    @_reached
    def create(self) -> None:
        with contextlib.suppress(FileExistsError):
            self.fs.makedirs(self.path, exist_ok=True)

    def _refresh(self) -> None:
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(self.path)

    @_reached
    def names(self) -> list[str]:
        self._refresh()
        try:
            entries = self.fs.ls(self.path, detail=False)
        except FileNotFoundError:
            return []
        return sorted(posixpath.basename(e.rstrip("/")) for e in entries if e.rstrip("/") != self.path)

    @_reached
    def read(self, name: str) -> bytes | None:
        self._refresh()
        try:
            return bytes(self.fs.cat_file(self._path(name)))
        except FileNotFoundError:
            return None

    @_reached
    def write(self, name: str, payload: bytes) -> None:
        if self.atomic_put:
            self.fs.pipe_file(self._path(name), payload)
            return
        temporary = self._path(f".{name}.{uuid.uuid4().hex[:12]}.zipsave-tmp")
        try:
            self.fs.pipe_file(temporary, payload)
            self.fs.mv(temporary, self._path(name))
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm_file(temporary)
            raise

    @_reached
    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(name))

    @_reached
    def rename(self, name: str, new_name: str) -> None:
        self.fs.mv(self._path(name), self._path(new_name))

    @_reached
    def open(self, name: str) -> IO[bytes]:
        self._refresh()
        return self.fs.open(self._path(name), "rb")

    @_reached
    def size(self, name: str) -> int:
        self._refresh()
        return int(self.fs.size(self._path(name)))


def open_store(location: Any, storage_options: dict[str, Any] | None = None) -> LocalStore | RemoteStore:
    """A store for a local folder (path or ``file://`` URL) or any other fsspec URL."""
    text = os.fspath(location)
    if text.startswith("file://"):
        return LocalStore(text[len("file://") :])
    if "://" in text:
        return RemoteStore(text, storage_options)
    return LocalStore(text)
