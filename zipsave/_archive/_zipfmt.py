"""The zip records zipsave writes and reads (local, central, zip64, end of central directory),
and the rule for safe member names."""

from __future__ import annotations

import struct
from typing import IO, Any

from .. import _format
from ..exceptions import ArchiveFormatError

__all__ = [
    "ALIGN_ID",
    "CENTRAL",
    "DESCRIPTOR64",
    "DOS_DATE",
    "EOCD",
    "EOCD64",
    "EXTERNAL_ATTR",
    "FLAG_DESCRIPTOR",
    "FLAG_UTF8",
    "LOCAL",
    "LOCATOR64",
    "MADE_BY",
    "READ_CHUNK",
    "VERSION_NEEDED",
    "ZIP64_ID",
    "check_name",
    "describe_non_zip",
    "MIN_ZIP_SIZE",
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
            "zipsave reads zip archives and never unpickles. A replay buffer saved by SB3's "
            "`save_replay_buffer` is one: SB3's `load_replay_buffer` reads it, running the code it holds, "
            "so only for a file you trust.",
        )
    if size < MIN_ZIP_SIZE:
        return (
            "not a zip archive, or truncated (File is not a zip file).",
            "Was the file fully written and copied? zipsave archives are zip files.",
        )
    return None
