"""The exceptions zipsave raises on purpose: one base, and subclasses that also inherit
the builtin a caller would catch."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from typing import Any, Callable, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = [
    "ArchiveFormatError",
    "ArchiveNotFoundError",
    "ArchiveLimitError",
    "CheckpointDirectoryError",
    "CheckpointLockedError",
    "DecodeError",
    "EncodeError",
    "IntegrityError",
    "MissingDependencyError",
    "ParameterMismatchError",
    "SignatureError",
    "SkippedEntry",
    "SkippedEntryWarning",
    "StorageError",
    "UnsafeGlobalError",
    "UnsafeNameError",
    "ZipsaveError",
    "ZipsaveWarning",
    "caller_stacklevel",
    "nesting_as_error",
]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning issued by the calling function point at the first
    frame outside zipsave: the user's line, however deep inside zipsave the warning is raised."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def describe_path(path: Any) -> str:
    """How an archive (path, URL or file object) is named in messages."""
    if path is None:
        return ""
    if isinstance(path, (str, os.PathLike)):
        return os.fspath(path)
    name = getattr(path, "name", None)
    if isinstance(name, str):
        return name
    return f"<{type(path).__name__}>"


class ZipsaveError(Exception):
    """Base of every error zipsave raises on purpose.

    The structured fields (``archive``, ``member``, ``key``) are kept as attributes so a
    caller can act on them; the message is built from them.
    """

    def __init__(
        self,
        message: str,
        *,
        archive: Any = None,
        member: str | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.archive = describe_path(archive) or None
        self.member = member
        self.key = key
        self.hint = hint
        self.detail = message
        super().__init__(self._compose())

    def _compose(self) -> str:
        where = []
        if self.archive:
            where.append(f"archive `{self.archive}`")
        if self.member is not None:
            where.append(f"member `{self.member}`")
        if self.key is not None:
            where.append(f"key `{self.key}`")
        text = self.detail
        if where:
            text = f"{', '.join(where)}: {text}"
        if self.hint:
            text = f"{text} {self.hint}"
        return text


class ArchiveFormatError(ZipsaveError, ValueError):
    """The file is not a readable zipsave/SB3 archive, or a member is malformed."""


class ArchiveLimitError(ArchiveFormatError):
    """A member or the archive exceeds a configured safety limit (zip bomb, huge member)."""


class IntegrityError(ArchiveFormatError):
    """A member's bytes do not match the size or hash recorded for it, or a tensor member
    cannot be read. ``expected`` and ``found`` hold the two checksums where they are known."""

    def __init__(self, message: str, *, expected: str | None = None, found: str | None = None, **kwargs: Any) -> None:
        self.expected = expected
        self.found = found
        super().__init__(message, **kwargs)


class StorageError(ZipsaveError, OSError):
    """Writing or reading the archive's storage failed (disk full, permission denied, a missing
    bucket or folder). ``errno`` is the cause's; the previous archive is left as it was."""

    def __init__(self, message: str, *, errno: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.errno = errno  # OSError's field, for callers that test `err.errno == ENOSPC`


class ArchiveNotFoundError(StorageError, FileNotFoundError):
    """The archive's path names no file (nor the path with ``.zip`` added); caught by
    ``except FileNotFoundError`` as well, like ``open`` and SB3's ``load``."""


class DecodeError(ZipsaveError, ValueError):
    """A value in ``data`` (or another JSON member) could not be decoded."""


class EncodeError(ZipsaveError, TypeError):
    """A value could not be encoded for saving."""


class UnsafeGlobalError(ZipsaveError):
    """Loading would import or call a global that is not trusted."""

    def __init__(self, global_name: str, **kwargs: Any) -> None:
        self.global_name = global_name
        #: Classes the pickle stores as code (cloudpickle's by-value classes), when it is one.
        self.by_value: tuple[str, ...] = ()
        kwargs.setdefault(
            "hint",
            f"To allow it, pass `trusted=[{global_name!r}]`, replace the entry with "
            "`custom_objects={key: value}`, or pass `allow_pickle=True` if you trust "
            "the archive completely.",
        )
        super().__init__(f"refusing to import untrusted global `{global_name}`.", **kwargs)


class UnsafeNameError(ZipsaveError, ValueError):
    """A name read from the archive (a ``pytorch_variables.pth`` key, a ``data`` key, a member or
    component folder) would address something other than the object's own state: a dunder, a
    class or function attribute, a module, or zipsave itself. ``name`` holds the name."""

    def __init__(self, name: str, reason: str, **kwargs: Any) -> None:
        self.name = name
        kwargs.setdefault(
            "hint",
            "A name from an archive may only address the parameters, buffers and plain attributes the "
            "object already has; nothing was written. The archive was not written by zipsave or SB3 as it is.",
        )
        super().__init__(f"the name `{name}` {reason}; refused.", **kwargs)


class ParameterMismatchError(ZipsaveError, ValueError):
    """Saved parameters do not fit the object they are loaded into."""


class SignatureError(ZipsaveError, ValueError):
    """An archive's signature is missing where one is required, or it does not hold: an
    unknown signer, a member whose digest does not match, a signature over another file, or a
    signature that cannot be read. ``reason`` says which: ``"no-signature"``,
    ``"unknown-signer"``, ``"digest-mismatch"``, ``"other-file"``, ``"invalid"`` or
    ``"malformed"`` (:doc:`signing`). Nothing of the model is returned."""

    def __init__(self, message: str, *, reason: str = "invalid", **kwargs: Any) -> None:
        self.reason = reason
        super().__init__(message, **kwargs)


class MissingDependencyError(ZipsaveError, ImportError):
    """An optional feature was asked for, but the package it needs is not installed."""


class ZipsaveWarning(UserWarning):
    """Warnings zipsave issues (skipped entries, hash mismatches of editable members)."""


@dataclasses.dataclass(frozen=True)
class SkippedEntry:
    """One entry that could not be loaded and was skipped.

    Attributes
    ----------
    member
        The archive member (``"data"``, ``"policy.pth"``, ...).
    key
        The ``data`` key, or ``None`` for a whole member.
    type_hint
        The saved ``":type:"`` hint, when there is one.
    cause
        Why it failed, in words.
    """

    member: str
    key: str | None
    type_hint: str | None
    cause: str

    def __str__(self) -> str:
        what = f"key `{self.key}` of member `{self.member}`" if self.key is not None else f"member `{self.member}`"
        hint = f" (type {self.type_hint})" if self.type_hint else ""
        return f"{what}{hint}: {self.cause}"


class SkippedEntryWarning(ZipsaveWarning):
    """Warns that one entry was skipped; ``.entry`` holds the :class:`SkippedEntry`."""

    def __init__(self, entry: SkippedEntry, archive: str | None) -> None:
        self.entry = entry
        self.archive = archive
        where = f"archive `{archive}`, " if archive else ""
        super().__init__(f"{where}skipped {entry}")


class CheckpointDirectoryError(ZipsaveError, ValueError):
    """A folder given to :class:`~zipsave.CheckpointManager` is not a checkpoint directory of
    zipsave (or its index is unreadable); nothing in it is changed."""


class CheckpointLockedError(ZipsaveError, RuntimeError):
    """Another :class:`~zipsave.CheckpointManager` holds the checkpoint directory."""


def nesting_as_error(func: _F) -> _F:
    """Decorate a public door (``load``, ``inspect``, ...): a value nested past Python's recursion
    limit in a hostile archive (a pickle of lists 100 000 deep) raises
    :class:`ArchiveFormatError` naming the archive, not a bare ``RecursionError``."""

    names = func.__code__.co_varnames[: func.__code__.co_argcount]
    position = names.index("path") if "path" in names else 0

    @functools.wraps(func)
    def door(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RecursionError as err:
            where = args[position] if len(args) > position else None
            raise ArchiveFormatError(
                "holds values nested too deeply to read (past Python's recursion limit).",
                archive=kwargs.get("path", where),
                hint="No archive written by zipsave or SB3 nests this deep; it was made to break readers.",
            ) from err

    return door  # type: ignore[return-value]
