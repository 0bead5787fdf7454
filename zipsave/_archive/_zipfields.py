"""The fields of zip records that the strict reader (``_structure``) checks: signatures, flag
bits, extra fields and member names, each decoded one way only; and the records it makes of
them (:class:`Entry`, :class:`Structure`)."""

from __future__ import annotations

import struct
from typing import Any

from ..exceptions import ArchiveFormatError
from ._zipfmt import FLAG_DESCRIPTOR, FLAG_UTF8, ZIP64_ID

__all__ = [
    "Entry",
    "Structure",
    "HINT",
    "KNOWN_FLAGS",
    "SIG_CENTRAL",
    "SIG_DESCRIPTOR",
    "SIG_EOCD",
    "SIG_EOCD64",
    "SIG_LOCAL",
    "SIG_LOCATOR",
    "UNICODE_PATH_ID",
    "decode_name",
    "extras",
    "refuse",
]

SIG_EOCD = b"PK\x05\x06"
SIG_EOCD64 = b"PK\x06\x06"
SIG_LOCATOR = b"PK\x06\x07"
SIG_CENTRAL = b"PK\x01\x02"
SIG_LOCAL = b"PK\x03\x04"
SIG_DESCRIPTOR = b"PK\x07\x08"
UNICODE_PATH_ID = 0x7075  # Info-ZIP's Unicode path: some readers take the name from it
#: Flag bits a member may set: deflate's speed hints (1, 2), a data descriptor (3), UTF-8 (11).
KNOWN_FLAGS = 0x0002 | 0x0004 | FLAG_DESCRIPTOR | FLAG_UTF8
HINT = "zipsave, zipfile, torch and SB3 never write this; the archive was damaged or built to fool a zip reader."


def refuse(detail: str, archive: Any, member: str | None = None) -> ArchiveFormatError:
    """The refusal of a structure no real writer produces."""
    return ArchiveFormatError(detail, archive=archive, member=member, hint=HINT)


def extras(raw: bytes, archive: Any, member: str, where: str) -> dict[int, bytes]:
    """The extra fields, which must tile the extra area exactly, each id at most once."""
    fields: dict[int, bytes] = {}
    pos = 0
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise refuse(f"{where} extra area ends in {len(raw) - pos} stray bytes.", archive, member)
        kind, length = struct.unpack_from("<HH", raw, pos)
        if pos + 4 + length > len(raw):
            raise refuse(f"{where} extra field {kind:#06x} claims {length} bytes past its area.", archive, member)
        if kind in fields and kind in (ZIP64_ID, UNICODE_PATH_ID):
            raise refuse(f"{where} holds extra field {kind:#06x} twice.", archive, member)
        fields.setdefault(kind, raw[pos + 4 : pos + 4 + length])
        pos += 4 + length
    unicode_path = fields.get(UNICODE_PATH_ID)
    if unicode_path is not None and unicode_path[5:] != member.encode("utf-8"):
        raise refuse(f"{where} Unicode path extra field names another member than the header.", archive, member)
    return fields


def decode_name(raw: bytes, flags: int, archive: Any) -> str:
    """A member's name as every zip reader reads it: UTF-8 with its flag, else ASCII."""
    try:
        if flags & FLAG_UTF8:
            return raw.decode("utf-8")
        return raw.decode("ascii")
    except UnicodeDecodeError:
        shown = raw.decode("utf-8", "backslashreplace")
        detail = (
            "name is not valid UTF-8, though its UTF-8 flag is set."
            if flags & FLAG_UTF8
            else "name is not ASCII and its UTF-8 flag (bit 11) is not set: zip readers decode such names "
            "differently (cp437, UTF-8, the system's code page)."
        )
        raise ArchiveFormatError(
            detail,
            archive=archive,
            member=shown,
            hint="Re-create the archive with a tool that sets the UTF-8 flag (Python's zipfile, zipsave), "
            "or keep member names ASCII.",
        ) from None


class Entry:
    """One member as the central directory and its local header agree to describe it (a plain
    class: a dataclass compiles its methods at import, time every first load paid)."""

    __slots__ = (
        "name",
        "raw_name",
        "flags",
        "method",
        "crc",
        "compress_size",
        "file_size",
        "header_offset",
        "data_offset",
    )

    def __init__(
        self,
        name: str,
        raw_name: bytes,
        flags: int,
        method: int,
        crc: int,
        compress_size: int,
        file_size: int,
        header_offset: int,
        data_offset: int = -1,
    ) -> None:
        self.name = name
        self.raw_name = raw_name
        self.flags = flags
        self.method = method
        self.crc = crc
        self.compress_size = compress_size
        self.file_size = file_size
        self.header_offset = header_offset
        self.data_offset = data_offset

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"Entry({fields})"


class Structure:
    """The members of a validated zip and where its central directory starts."""

    __slots__ = ("entries", "cd_start")

    def __init__(self, entries: list[Entry], cd_start: int) -> None:
        self.entries = entries
        self.cd_start = cd_start

    def __repr__(self) -> str:
        return f"Structure(entries={self.entries!r}, cd_start={self.cd_start!r})"
