"""The exceptions zipsave raises on purpose: one base, and subclasses that also inherit
the builtin a caller would catch."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

__all__ = [
    "ArchiveFormatError",
    "ArchiveLimitError",
    "DecodeError",
    "EncodeError",
    "IntegrityError",
    "MissingDependencyError",
    "ParameterMismatchError",
    "SkippedEntry",
    "SkippedEntryWarning",
    "UnsafeGlobalError",
    "ZipsaveError",
    "ZipsaveWarning",
]


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
    """A member's bytes do not match the size or hash recorded for it."""


class DecodeError(ZipsaveError, ValueError):
    """A value in ``data`` (or another JSON member) could not be decoded."""


class EncodeError(ZipsaveError, TypeError):
    """A value could not be encoded for saving."""


class UnsafeGlobalError(ZipsaveError):
    """Loading would import or call a global that is not trusted."""

    def __init__(self, global_name: str, **kwargs: Any) -> None:
        self.global_name = global_name
        kwargs.setdefault(
            "hint",
            f"To allow it, pass `trusted=[{global_name!r}]`, replace the entry with "
            "`custom_objects={key: value}`, or pass `allow_pickle=True` if you trust "
            "the archive completely.",
        )
        super().__init__(f"refusing to import untrusted global `{global_name}`.", **kwargs)


class ParameterMismatchError(ZipsaveError, ValueError):
    """Saved parameters do not fit the object they are loaded into."""


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
