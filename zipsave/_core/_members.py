"""What a load session says of an archive's members: which ones no reader of the format looks
at, which tensor member an error found broken (and the ``exclude=`` that leaves it out), and its checksums."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

from .. import _format
from ..exceptions import ArchiveFormatError, DecodeError, ParameterMismatchError, UnsafeGlobalError, ZipsaveError

__all__ = ["KNOWN_MEMBERS", "broken_tensor_member", "checksums", "leave_out", "stem", "unrecognised"]

#: The members of a folder that readers of the format look at, besides ``.pth`` and ``.npy``.
KNOWN_MEMBERS = frozenset(
    {
        _format.DATA,
        _format.INIT,
        _format.VERSION,
        _format.SB3_VERSION,
        _format.SYSTEM_INFO,
        _format.MANIFEST,
        _format.SIGNATURE,
    }
)


def broken_tensor_member(member: str, err: BaseException) -> str | None:
    """The tensor member (``.pth``/``.npy``) that ``err`` found corrupt or unreadable, if any.
    A state dict that does not fit the object (:class:`ParameterMismatchError`) is not broken."""
    if isinstance(err, (ParameterMismatchError, UnsafeGlobalError)) or not isinstance(err, (ZipsaveError, OSError)):
        return None
    if isinstance(err, ZipsaveError) and not isinstance(err, (ArchiveFormatError, DecodeError)):
        return None
    for name in (getattr(err, "member", None), member):
        if isinstance(name, str) and name.endswith((_format.PTH_SUFFIX, _format.NPY_SUFFIX)):
            return name
    return None


def leave_out(member: str, key: str | None, broken: str) -> str:
    """The ``exclude=`` pattern that leaves a broken tensor member out of a load."""
    if broken.endswith(_format.NPY_SUFFIX) and key is not None:
        folder = member.rpartition("/")[0]
        return folder or key  # a component's arrays go with the component
    return stem(broken)


def stem(member: str) -> str:
    """A ``.pth`` member's name without its suffix: the ``exclude=`` pattern of its state dict."""
    return member[: -len(_format.PTH_SUFFIX)] if member.endswith(_format.PTH_SUFFIX) else member


def unrecognised(names: Iterable[str]) -> list[str]:
    """Members of a zipsave archive that no reader of the format looks at."""
    out = []
    for name in names:
        folder, _, base = name.rpartition("/")
        if not base:  # a directory entry added by a zip tool
            continue
        if base in KNOWN_MEMBERS or base.endswith(_format.PTH_SUFFIX):
            continue
        if base.endswith(_format.NPY_SUFFIX) and (folder + "/").endswith(_format.ARRAYS_DIR):
            continue
        out.append(name)
    return out


def checksums(reader: Any, member: str) -> tuple[str | None, str | None]:
    """The CRC-32 the zip directory records for ``member`` and the one of its bytes, as shown in
    an integrity error (``"no such member"``, or why the bytes could not be read)."""
    if member not in reader:
        return None, "no such member"
    expected = f"crc32 {reader.info(member).CRC:08x}"
    try:
        crc = 0
        for piece in reader.iter_chunks(member):
            crc = zlib.crc32(piece, crc)
    except ZipsaveError as err:
        return expected, f"unreadable bytes ({err.detail})"
    return expected, f"crc32 {crc:08x}"
