"""The zip records zipsave writes and reads (local, central, zip64, end of central directory),
the rule for safe member names, and the fields of those records that the strict reader
(``_structure``) checks: signatures, flag bits, extra fields and member names, each decoded one
way only, with the records it makes of them (:class:`Entry`, :class:`Structure`)."""

from __future__ import annotations

import struct
from typing import IO, Any

from .. import _format
from ..exceptions import ArchiveFormatError

__all__ = [
    "ALIGN_ID",
    "CENTRAL",
    "check_name",
    "decode_name",
    "describe_non_zip",
    "DESCRIPTOR64",
    "DOS_DATE",
    "Entry",
    "EOCD",
    "EOCD64",
    "EXTERNAL_ATTR",
    "extras",
    "FLAG_DESCRIPTOR",
    "FLAG_UTF8",
    "HINT",
    "KNOWN_FLAGS",
    "LOCAL",
    "LOCATOR64",
    "MADE_BY",
    "MIN_ZIP_SIZE",
    "READ_CHUNK",
    "refuse",
    "SIG_CENTRAL",
    "SIG_DESCRIPTOR",
    "SIG_EOCD",
    "SIG_EOCD64",
    "SIG_LOCAL",
    "SIG_LOCATOR",
    "Structure",
    "UNICODE_PATH_ID",
    "VERSION_NEEDED",
    "ZIP64_ID",
]

LOCAL = struct.Struct("<IHHHHHIIIHH")
CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
EOCD = struct.Struct("<IHHHHIIH")
EOCD64 = struct.Struct("<IQHHIIQQQQ")
LOCATOR64 = struct.Struct("<IIQI")
DESCRIPTOR64 = struct.Struct("<IIQQ")
ZIP64_ID = 0x0001
ALIGN_ID = 0xD935  # the id Android's zipalign uses for padding
VERSION_NEEDED = 45  # zip64 members
MADE_BY = (3 << 8) | 45  # Unix, so zip tools extract with normal permissions
EXTERNAL_ATTR = (0o100644 & 0xFFFF) << 16
DOS_DATE = ((_format.DATE_TIME[0] - 1980) << 9) | (_format.DATE_TIME[1] << 5) | _format.DATE_TIME[2]
FLAG_DESCRIPTOR = 0x08
FLAG_UTF8 = 0x800
READ_CHUNK = 16 << 20


def check_name(name: str, archive: Any) -> None:
    parts = name.replace("\\", "/").split("/")
    if (
        not name
        or name.startswith(("/", "\\"))
        or (len(name) > 1 and name[1] == ":")
        or ".." in parts
        or "\x00" in name
    ):
        raise ArchiveFormatError(
            "unsafe member name (absolute, drive-qualified or containing `..`).",
            archive=archive,
            member=name,
            hint="zipsave never writes such names; the archive was made by another tool or tampered with.",
        )


#: The smallest zip file: one end-of-central-directory record.
MIN_ZIP_SIZE = 22


def describe_non_zip(fp: IO[bytes]) -> tuple[str, str] | None:
    """What a file that zipfile cannot open is, and what to do, where its first bytes tell
    more than "not a zip": a pickle (SB3's ``save_replay_buffer`` writes ``.pkl`` files), or a
    file shorter than any zip (which a remote file object fails with ``ValueError`` where a
    local file fails as "not a zip file"). ``None`` otherwise. Reads at most 2 bytes."""
    try:
        size = fp.seek(0, 2)
        fp.seek(0)
        head = fp.read(2)
    except (OSError, ValueError):
        return None
    if len(head) == 2 and head[0] == 0x80 and head[1] in (2, 3, 4, 5):
        return (
            "is a pickle file, not a zip archive.",
            "zipsave reads zip archives and never unpickles. SB3's `save_replay_buffer` and `VecNormalize.save` "
            "write such files: read one with `model.load_replay_buffer(path)` or `VecNormalize.load(path, venv)` "
            "under `zipsave.sb3.install()`, which unpickles it under the allowlist (SB3's own runs any code it "
            "holds).",
        )
    if size < MIN_ZIP_SIZE:
        return (
            "not a zip archive, or truncated (File is not a zip file).",
            "Was the file fully written and copied? zipsave archives are zip files.",
        )
    return None


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
