"""fsspec URLs (``s3://bucket/run/x.zip``, ``memory://x.zip``, ...) as archive destinations
and sources, through the optional ``remote`` extra.

Saving writes the whole archive to a local temporary file first and uploads it only when it
is complete, so no half-written object ever sits at the key: an object store's upload
(S3, GCS, Azure) creates the object whole or not at all; on other filesystems the upload
goes to a temporary sibling that is then renamed. Loading reads with range requests when the
filesystem can seek, and downloads to a temporary file when it cannot.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import tempfile
import uuid
from collections.abc import Iterator
from typing import IO, Any

from .._optional import MissingDependencyError, require
from ..exceptions import ArchiveFormatError, ArchiveNotFoundError, StorageError, ZipsaveError
from . import _progress
from ._files import atomic_output, open_input, seekable, with_suffix

__all__ = ["remote_input", "remote_output"]

#: Filesystems whose upload creates the object whole or not at all (single PUT, or a
#: multipart upload that appears only when completed).
_ATOMIC_UPLOAD = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "oci"})
_COPY_CHUNK = 16 << 20


def _filesystem(url: str, storage_options: dict[str, Any] | None) -> tuple[Any, str]:
    fsspec = require("fsspec", extra="remote", feature=f"the URL `{url}`")
    try:
        return fsspec.core.url_to_fs(url, **(storage_options or {}))
    except ImportError as err:  # e.g. "Install s3fs to access S3"
        raise MissingDependencyError(
            f"the URL `{url}` needs a filesystem package that is not installed ({err}).",
            hint="Install the fsspec implementation for this protocol (s3fs for s3://, gcsfs for gs://, ...).",
        ) from err
    except ValueError as err:
        raise ZipsaveError(f"is not a URL fsspec understands ({err}).", archive=url) from err


def _protocols(fs: Any) -> set[str]:
    protocol = fs.protocol
    return {protocol} if isinstance(protocol, str) else set(protocol)


def _is_local(fs: Any) -> bool:
    return bool(_protocols(fs) & {"file", "local"})


@contextlib.contextmanager
def remote_output(
    url: str, *, storage_options: dict[str, Any] | None = None, progress: bool = False
) -> Iterator[IO[bytes]]:
    """Yield a writable local file; when the block exits cleanly it is uploaded to ``url``.

    On an exception nothing is uploaded and the previous object at ``url`` is untouched.
    A URL without a suffix gets ``.zip``, as a local path does.
    """
    fs, path = _filesystem(url, storage_options)
    path = with_suffix(path)
    if _is_local(fs):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with atomic_output(path) as f:
            yield f
        return
    fd, staging = tempfile.mkstemp(prefix="zipsave-upload-", suffix=".zip")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        with _progress.transfer_callback(progress, desc=f"zipsave upload {url}") as callback:
            _upload(fs, staging, path, callback)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging)


def _upload(fs: Any, local: str, path: str, callback: Any) -> None:
    if _protocols(fs) & _ATOMIC_UPLOAD:
        fs.put_file(local, path, callback=callback)
        return
    # A plain copy could leave a partial file at ``path``: upload beside it, then rename.
    head, tail = posixpath.split(path)
    temporary = posixpath.join(head, f".{tail}.{uuid.uuid4().hex[:12]}.zipsave-tmp")
    try:
        fs.put_file(local, temporary, callback=callback)
        fs.mv(temporary, path)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm_file(temporary)
        raise


@contextlib.contextmanager
def remote_input(
    url: str, *, storage_options: dict[str, Any] | None = None, progress: bool = False
) -> Iterator[IO[bytes]]:
    """Yield a readable, seekable binary file for the archive at ``url``.

    Tries ``url``, then ``url + ".zip"``. Seekable filesystems are read with range requests
    (only the members a load needs travel); others are downloaded to a temporary file.
    """
    fs, path = _filesystem(url, storage_options)
    if _is_local(fs):
        f = open_input(path)
        with f:
            yield f
        return
    f = _open_first(fs, url, [path] if path.endswith(".zip") else [path, path + ".zip"])
    with f:
        if seekable(f):
            yield f
            return
        with tempfile.TemporaryFile() as spool:
            with _progress.transfer_callback(progress, desc=f"zipsave download {url}") as callback:
                callback.set_size(getattr(f, "size", None))
                while chunk := f.read(_COPY_CHUNK):
                    spool.write(chunk)
                    callback.relative_update(len(chunk))
            spool.seek(0)
            yield spool


_CREDENTIALS = "Check the URL and the credentials or `storage_options` it needs."


def _open_first(fs: Any, url: str, candidates: list[str]) -> IO[bytes]:
    for candidate in candidates:
        try:
            return fs.open(candidate, "rb")
        except FileNotFoundError:
            continue
        except IsADirectoryError:
            raise ArchiveFormatError("is a directory, not a zip archive.", archive=url) from None
        except Exception as err:  # the filesystem's own (botocore's NoCredentialsError, a refused request)
            raise StorageError(
                f"could not be opened ({type(err).__name__}: {err}).",
                archive=url,
                errno=getattr(err, "errno", None),
                hint=_CREDENTIALS,
            ) from err
    # a FileNotFoundError, as a missing local archive is: `except FileNotFoundError` works for both
    raise ArchiveNotFoundError(
        "no such object (also tried with a `.zip` suffix).", archive=url, errno=errno.ENOENT, hint=_CREDENTIALS
    )
