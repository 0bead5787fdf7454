"""The zip records zipsave writes and reads (local, central, zip64, end of central directory),
and the rule for safe member names."""

from __future__ import annotations

import struct
from typing import Any

from .. import _format
from ..exceptions import ArchiveFormatError

__all__ = [
    "ALIGN_ID", "CENTRAL", "DESCRIPTOR64", "DOS_DATE", "EOCD", "EOCD64", "EXTERNAL_ATTR", "FLAG_DESCRIPTOR",
    "FLAG_UTF8", "LOCAL", "LOCATOR64", "MADE_BY", "READ_CHUNK", "VERSION_NEEDED", "ZIP64_ID", "check_name",
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
