"""Safe extraction of an archive into a folder (``zipsave extract``).

Every name is checked before a byte is written: no absolute or drive-qualified names, no
``..``, no symbolic links or other special files, and no write through a symbolic link that
already sits in the destination. Each member's CRC-32 is checked while it is copied, and its
SHA-256 against ``manifest.json`` where the manifest records one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import unicodedata
import warnings
import zlib
from typing import Any

from .. import _format
from .._archive import ArchiveSource
from ..exceptions import (
    ArchiveFormatError,
    IntegrityError,
    StorageError,
    ZipsaveError,
    ZipsaveWarning,
    caller_stacklevel,
    reading,
)

__all__ = ["extract"]

_CHUNK = 1 << 20


def extract(path: Any, folder: str | os.PathLike, *, overwrite: bool = False, limits: Any = None) -> list[str]:
    """Extract every member of ``path`` below ``folder``; return the files written.

    Raises
    ------
    ArchiveFormatError
        A member is a link or special file, or its name would land outside ``folder``.
    ZipsaveError
        A file exists already and ``overwrite`` is not set, or a member's path in ``folder``
        is a symbolic link (checked before anything is written).
    StorageError
        ``folder`` is a file.
    IntegrityError
        A member's bytes do not match its CRC-32 (the partial file is removed).
    """
    with ArchiveSource(path, limits=limits) as src:
        reader = src.reader
        root = os.path.realpath(os.fspath(folder))
        if os.path.exists(root) and not os.path.isdir(root):
            raise StorageError(
                f"cannot be extracted into `{os.fspath(folder)}`: it is a file, not a folder.",
                archive=src.name,
                hint="Name a folder (it is created if missing).",
            )
        plan: list[tuple[str, str, bool]] = []
        name_max = _name_max(root)
        for name in reader.names():
            info = reader.info(name)
            kind = stat.S_IFMT(info.external_attr >> 16)
            is_dir = name.endswith("/") or kind == stat.S_IFDIR
            if not is_dir and kind not in (0, stat.S_IFREG):
                what = "a symbolic link" if kind == stat.S_IFLNK else "a special file"
                raise ArchiveFormatError(f"is {what}; refusing to extract it.", archive=src.name, member=name)
            parts = name.rstrip("/").split("/")
            if "\\" in name or any(part in ("", ".", "..") for part in parts):
                raise ArchiveFormatError(
                    "has an unsafe name (empty, `.` or `..` parts, or backslashes); refusing to extract it.",
                    archive=src.name,
                    member=name,
                )
            if not name.isprintable():
                raise ArchiveFormatError(
                    "has a name with characters a terminal or file manager acts on or hides (controls, bidi "
                    "overrides, zero-width or separator characters; shown escaped); refusing to make it a file name.",
                    archive=src.name,
                    member=name,
                    hint="zipsave.load and zipsave.read take such members as they are.",
                )
            long = next((part for part in parts if len(os.fsencode(part)) > name_max), None)
            if long is not None:
                raise ArchiveFormatError(
                    f"has a part of {len(os.fsencode(long))} bytes, past this file system's {name_max}; "
                    "refusing to extract it.",
                    archive=src.name,
                    member=name,
                )
            target = os.path.join(root, *parts)
            if not is_dir and os.path.islink(target):
                raise ZipsaveError(
                    f"`{target}` is a symbolic link, and extract never writes through one; nothing was written.",
                    archive=src.name,
                    member=name,
                    hint="Remove the link, or extract into another folder.",
                )
            if not is_dir and not overwrite and os.path.lexists(target):
                raise ZipsaveError(
                    f"`{target}` exists already.", archive=src.name, member=name, hint="Pass --overwrite to replace it."
                )
            plan.append((name, target, is_dir))
        _check_tree(plan, src.name)

        written = []
        for name, target, is_dir in plan:
            # What the file system says now (a disk full, a name it refuses) is about this member.
            with reading(src.name, member=name, doing="extracted"):
                _make_dirs(root, target if is_dir else os.path.dirname(target), src.name, name)
                if not is_dir:
                    _copy_member(src, name, target, overwrite)
                    written.append(target)
        return written


def _name_max(root: str) -> int:
    """The longest file name (bytes) the destination's file system takes."""
    probe = root
    while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        return int(os.pathconf(probe, "PC_NAME_MAX"))
    except (AttributeError, OSError, ValueError):
        return 255


def _folded(path: str) -> str:
    """``path`` as a file system that ignores case and Unicode normalization takes it (macOS's
    APFS and HFS+, Windows' NTFS): ``Policy.pth``, ``policy.pth`` and ``POLICY.pth`` are one;
    so are ``policy.pth.`` and ``policy.pth`` (Windows drops a name's trailing dots and spaces)."""
    parts = unicodedata.normalize("NFC", path).casefold().split(os.sep)
    return os.sep.join(part.rstrip(" .") or part for part in parts)


def _check_tree(plan: list[tuple[str, str, bool]], archive: str) -> None:
    """Refuse, before a byte is written, members that one file system takes for one path: a
    file where another member needs a folder (``a`` and ``a/b``: the second could only fail
    halfway), or names that differ only by case or Unicode normalization (``Policy.pth`` and
    ``policy.pth``: on macOS or Windows one overwrote the other, or failed halfway), wherever
    the folder is, so that an archive extracts to the same files everywhere."""
    seen: dict[str, tuple[str, bool]] = {}
    for name, target, is_dir in plan:
        other = seen.setdefault(_folded(target), (name, is_dir))
        if other[0] != name and not (is_dir and other[1]):
            raise ArchiveFormatError(
                f"names the same file as `{other[0]}` where case is ignored (macOS, Windows); refusing to extract it.",
                archive=archive,
                member=name,
            )
    files = {folded: name for folded, (name, is_dir) in seen.items() if not is_dir}
    for name, target, _ in plan:
        folder = _folded(os.path.dirname(target))
        while folder not in files and len(folder) > 1 and os.path.dirname(folder) != folder:
            folder = os.path.dirname(folder)
        if folder in files:
            raise ArchiveFormatError(
                f"lies below `{files[folder]}`, which the archive also holds as a file; refusing to extract it.",
                archive=archive,
                member=name,
            )


def _make_dirs(root: str, directory: str, archive: str, member: str) -> None:
    os.makedirs(directory, exist_ok=True)
    real = os.path.realpath(directory)
    if real != root and not real.startswith(root + os.sep):
        raise ArchiveFormatError(
            f"would be written to `{real}`, outside the destination (a symbolic link in the way?).",
            archive=archive,
            member=member,
        )


def _copy_member(src: ArchiveSource, name: str, target: str, overwrite: bool) -> None:
    reader = src.reader
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    if not overwrite:
        flags |= os.O_EXCL
    recorded = reader.expected(name) or {}
    with reader.open_view(name) as view:
        crc, sha = _write_file(src, name, view, target, flags, sha256=bool(recorded.get("sha256")))
    if crc != reader.info(name).CRC:
        with contextlib.suppress(OSError):
            os.unlink(target)
        raise IntegrityError(
            f"CRC-32 {crc:08x} does not match the recorded {reader.info(name).CRC:08x} (corrupted).",
            archive=src.name,
            member=name,
        )
    try:
        reader.check_recorded(name)
        if sha is not None:
            reader.check_digest(name, sha256=sha)
    except ZipsaveError as err:
        edited = " (a member people may edit)" if os.path.basename(name) in _format.EDITABLE else ""
        warnings.warn(ZipsaveWarning(f"{err}{edited}"), stacklevel=caller_stacklevel())


def _write_file(
    src: ArchiveSource, name: str, view: Any, target: str, flags: int, *, sha256: bool
) -> tuple[int, str | None]:
    """Copy the member to a new file; return its CRC-32 and (if asked) SHA-256. A failure
    removes the file."""
    crc, sha = 0, hashlib.sha256() if sha256 else None
    buf = bytearray(_CHUNK)
    fd = os.open(target, flags, 0o666)
    try:
        with open(fd, "wb") as out:
            pos = 0
            while pos < view.size:
                n = view.read_at(pos, buf)
                if not n:
                    raise ArchiveFormatError("ends early (truncated).", archive=src.name, member=name)
                chunk = memoryview(buf)[:n]
                out.write(chunk)
                crc = zlib.crc32(chunk, crc)
                if sha is not None:
                    sha.update(chunk)
                pos += n
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(target)
        raise
    return crc, None if sha is None else sha.hexdigest()
