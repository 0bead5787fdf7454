"""The one reading of a zip's structure: the end record, the zip64 records, the central
directory, every local header and data descriptor. Every byte of the file is accounted for,
and wherever two zip readers could see different members the archive is refused."""

from __future__ import annotations

import struct
from typing import IO, Any

from ..exceptions import ArchiveFormatError, ArchiveLimitError
from ._limits import Limits
from ._zipfmt import (
    CENTRAL,
    EOCD,
    EOCD64,
    FLAG_DESCRIPTOR,
    HINT,
    KNOWN_FLAGS,
    LOCAL,
    LOCATOR64,
    SIG_CENTRAL,
    SIG_DESCRIPTOR,
    SIG_EOCD,
    SIG_EOCD64,
    SIG_LOCAL,
    SIG_LOCATOR,
    ZIP64_ID,
    Entry,
    Structure,
    check_name,
    decode_name,
    extras,
    refuse,
)

__all__ = ["Entry", "Structure", "check_one_end", "read_structure"]

_U32 = 0xFFFFFFFF
_U16 = 0xFFFF


def _find_end(fp: IO[bytes], size: int, archive: Any) -> tuple[int, bytes] | None:
    """The end record's offset and the bytes from there to the end of the file (``None`` if
    there is none): the record whose comment runs exactly to the end. A second such record
    (a whole end record closing the comment of another) is refused here; another signature
    in the comment or the directory is refused by the caller."""
    start = max(0, size - EOCD.size - _U16)
    fp.seek(start)
    tail = fp.read(size - start)
    found = None
    pos = tail.rfind(SIG_EOCD)
    while pos >= 0:
        if pos + EOCD.size <= len(tail) and pos + EOCD.size + struct.unpack_from("<H", tail, pos + 20)[0] == len(tail):
            if found is not None:  # a whole end record at the end of the comment of another
                raise _second_end(archive)
            found = pos
        pos = tail.rfind(SIG_EOCD, 0, pos)
    if found is not None:
        return start + found, tail[found:]
    return None


def _no_end(size: int, archive: Any) -> ArchiveFormatError:
    return ArchiveFormatError(
        f"does not end with its end-of-central-directory record ({size} bytes): the archive is "
        "truncated (cut off before its end) or has data appended after it.",
        archive=archive,
        hint="Was the file fully written and copied?",
    )


def _directory_extent(fp: IO[bytes], end: int, record: bytes, archive: Any) -> tuple[int, int, int, int]:
    """``(entries, directory size, directory offset, where the directory must end)`` from the
    end record and, where a zip64 locator precedes it, the zip64 end record."""
    _sig, disk, cd_disk, here, total, cd_size, cd_offset, _clen = EOCD.unpack_from(record)
    first = max(0, end - LOCATOR64.size - EOCD64.size)
    fp.seek(first)
    before = fp.read(end - first)
    if len(before) < LOCATOR64.size or before[-LOCATOR64.size :][:4] != SIG_LOCATOR:
        if disk or cd_disk or here != total:
            raise refuse("end record describes a multi-disk archive.", archive)
        return total, cd_size, cd_offset, end
    _s, eocd64_disk, eocd64_offset, disks = LOCATOR64.unpack_from(before, len(before) - LOCATOR64.size)
    where = end - LOCATOR64.size - EOCD64.size
    if len(before) < LOCATOR64.size + EOCD64.size or before[:4] != SIG_EOCD64 or eocd64_offset != where:
        raise refuse(
            f"zip64 locator points at byte {eocd64_offset}, but no 56-byte zip64 end record sits right "
            "before it (zip readers would look in different places).",
            archive,
        )
    fields = EOCD64.unpack_from(before)
    _s, record_size, _made, _needed, disk64, cd_disk64, here64, total64, cd_size64, cd_offset64 = fields
    if record_size != EOCD64.size - 12 or eocd64_disk or disks > 1 or disk64 or cd_disk64 or here64 != total64:
        raise refuse("zip64 end record has extensible data or describes a multi-disk archive.", archive)
    for name, small, big, sentinel in (
        ("entry count", total, total64, _U16),
        ("entry count on this disk", here, here64, _U16),
        ("directory size", cd_size, cd_size64, _U32),
        ("directory offset", cd_offset, cd_offset64, _U32),
    ):
        if small not in (big, sentinel):
            raise refuse(f"end record's {name} {small} differs from the zip64 end record's {big}.", archive)
    if (disk, cd_disk) not in ((0, 0), (_U16, _U16)):
        raise refuse("end record describes a multi-disk archive.", archive)
    return total64, cd_size64, cd_offset64, where


def read_structure(fp: IO[bytes], *, archive: Any, limits: Limits) -> Structure:
    """Parse and check the whole structure of the zip in ``fp`` (``docs/format.rst``, "Reading
    a zip"). Raises :class:`ArchiveFormatError` or :class:`ArchiveLimitError`."""
    try:
        size = fp.seek(0, 2)
        found = _find_end(fp, size, archive)
        if found is None:
            raise _no_end(size, archive)
        end, record = found
        total, cd_size, cd_start, cd_end = _directory_extent(fp, end, record, archive)
        if total > limits.max_members:
            raise ArchiveLimitError(f"holds {total} members; the limit is {limits.max_members}.", archive=archive)
        if cd_start + cd_size != cd_end:
            raise refuse(
                f"central directory is declared at bytes {cd_start}-{cd_start + cd_size}, but it must end where "
                f"the end records start ({cd_end}): data was prepended (another archive, a self-extracting stub) "
                "or the directory is damaged.",
                archive,
            )
        fp.seek(cd_start)
        directory = fp.read(end - cd_start)
        if len(directory) != end - cd_start:
            raise refuse("central directory is cut short.", archive)
        if record.find(SIG_EOCD, 4) >= 0:  # zipfile takes the last end record it finds
            raise _second_end(archive)
        entries = _central_entries(directory[:cd_size], total, cd_start, archive, limits)
        _check_layout(fp, entries, cd_start, archive)
    except (OSError, ValueError, struct.error, OverflowError) as err:
        if isinstance(err, ArchiveFormatError):
            raise
        raise ArchiveFormatError(f"unreadable zip structure ({type(err).__name__}: {err}).", archive=archive) from err
    return Structure(entries, cd_start)


def _second_end(archive: Any) -> ArchiveFormatError:
    return refuse(
        "holds a second end-of-central-directory record (in the archive comment); "
        "zip readers would disagree on which one is the archive's.",
        archive,
    )


def check_one_end(fp: IO[bytes], *, archive: Any) -> None:
    """Refuse an archive whose comment holds a second end record. zipfile takes the last one
    it finds, so it cannot open such an archive at all, and would otherwise call it
    truncated."""
    try:
        found = _find_end(fp, fp.seek(0, 2), archive)
    except (OSError, ValueError) as err:
        if isinstance(err, ArchiveFormatError):
            raise
        return
    if found is not None and found[1].find(SIG_EOCD, 4) >= 0:
        raise _second_end(archive)


def _central_entries(directory: bytes, total: int, cd_start: int, archive: Any, limits: Limits) -> list[Entry]:
    entries: list[Entry] = []
    seen: set[str] = set()
    pos = 0
    declared = 0
    for _ in range(total):
        if directory[pos : pos + 4] != SIG_CENTRAL or pos + CENTRAL.size > len(directory):
            raise refuse(f"central directory entry {len(entries)} is missing or damaged.", archive)
        fields = CENTRAL.unpack_from(directory, pos)
        flags, method, crc, csize, usize, nlen, xlen, clen, disk = (
            fields[3],
            fields[4],
            fields[7],
            fields[8],
            fields[9],
            fields[10],
            fields[11],
            fields[12],
            fields[13],
        )
        offset = fields[16]
        start = pos + CENTRAL.size
        pos = start + nlen + xlen + clen
        if pos > len(directory):
            raise refuse(f"central directory entry {len(entries)} runs past the directory.", archive)
        raw_name = directory[start : start + nlen]
        name = decode_name(raw_name, flags, archive)
        check_name(name, archive)
        if name in seen:
            raise ArchiveFormatError(
                "appears twice in the archive; refusing to guess which copy is meant.", archive=archive, member=name
            )
        seen.add(name)
        extra_fields = extras(directory[start + nlen : start + nlen + xlen], archive, name, "central directory entry's")
        zip64 = extra_fields.get(ZIP64_ID)
        wanted = [usize == _U32, csize == _U32, offset == _U32]
        needed = 8 * sum(wanted) + (4 if disk == _U16 else 0)
        if (zip64 is not None or needed) and len(zip64 or b"") != needed:
            raise refuse(
                f"zip64 extra field holds {len(zip64 or b'')} bytes where the entry's header calls for {needed}.",
                archive,
                name,
            )
        values = list(struct.unpack_from(f"<{sum(wanted)}Q", zip64 or b"")) if any(wanted) else []
        if wanted[0]:
            usize = values.pop(0)
        if wanted[1]:
            csize = values.pop(0)
        if wanted[2]:
            offset = values.pop(0)
        if disk == _U16:
            disk = struct.unpack_from("<I", zip64 or b"", len(zip64 or b"") - 4)[0]
        _check_entry(name, flags, method, csize, usize, offset, disk, cd_start, archive, limits)
        declared += usize
        entries.append(Entry(name, raw_name, flags, method, crc, csize, usize, offset))
    if pos != len(directory):
        raise refuse(
            f"central directory holds {len(directory) - pos} bytes after its {total} entries (the end record "
            "counts fewer entries than it holds, or the directory is damaged).",
            archive,
        )
    if declared > limits.max_total_bytes:
        raise ArchiveLimitError(
            f"members total {declared} bytes; the limit is {limits.max_total_bytes}.", archive=archive
        )
    return entries


def _check_entry(
    name: str,
    flags: int,
    method: int,
    csize: int,
    usize: int,
    offset: int,
    disk: int,
    cd_start: int,
    archive: Any,
    limits: Limits,
) -> None:
    if flags & 0x41:
        raise ArchiveFormatError("is encrypted; zipsave does not read encrypted members.", archive=archive, member=name)
    if flags & 0x20:
        raise ArchiveFormatError(
            "uses compressed patched data (flag bit 5), which zipsave does not read.", archive=archive, member=name
        )
    if method not in (0, 8):
        raise ArchiveFormatError(
            f"uses compression method {method}; expected stored (0) or deflated (8).", archive=archive, member=name
        )
    if flags & ~KNOWN_FLAGS:
        raise refuse(
            f"sets general-purpose flag bits {flags & ~KNOWN_FLAGS:#06x}, which zipsave does not read.", archive, name
        )
    if usize > limits.max_member_bytes:
        raise ArchiveLimitError(
            f"declares {usize} bytes; the limit is {limits.max_member_bytes}.", archive=archive, member=name
        )
    if method == 0 and csize != usize:
        raise ArchiveFormatError(
            f"is stored but declares {csize} compressed and {usize} uncompressed bytes.", archive=archive, member=name
        )
    if disk:
        raise refuse(f"says it starts on disk {disk}; zipsave reads single-file archives.", archive, name)
    if offset + LOCAL.size + csize > cd_start:
        raise ArchiveFormatError(
            "extends past the start of the central directory (truncated or forged).", archive=archive, member=name
        )


def _check_layout(fp: IO[bytes], entries: list[Entry], cd_start: int, archive: Any) -> None:
    """Members lie one after the other from byte 0 to the central directory: no bytes before
    the first, between two or after the last; each local header agrees with its entry."""
    ordered = sorted(entries, key=lambda e: e.header_offset)
    expected = 0
    for i, entry in enumerate(ordered):
        if entry.header_offset != expected:
            _gap(ordered[i - 1] if i else None, entry, expected, archive)
        expected = _check_local(fp, entry, archive)
        if entry.flags & FLAG_DESCRIPTOR:
            following = ordered[i + 1].header_offset if i + 1 < len(ordered) else cd_start
            expected = _check_descriptor(fp, entry, expected, following, archive)
    if expected != cd_start:
        raise refuse(
            f"holds {cd_start - expected} bytes between its last member and the central directory "
            "(hidden data, or a member the directory does not list).",
            archive,
        )


def _gap(previous: Entry | None, entry: Entry, expected: int, archive: Any) -> None:
    if previous is None:
        raise refuse(
            f"holds {entry.header_offset} bytes before its first member (another file or archive prepended, "
            "or a self-extracting stub).",
            archive,
        )
    if entry.header_offset < expected:
        raise ArchiveFormatError(
            f"overlaps member `{entry.name}` (a zip bomb, or a forged directory).",
            archive=archive,
            member=previous.name,
        )
    raise refuse(
        f"is followed by {entry.header_offset - expected} bytes that belong to no member before `{entry.name}` "
        "(hidden data, or a member the directory does not list).",
        archive,
        previous.name,
    )


def _check_local(fp: IO[bytes], entry: Entry, archive: Any) -> int:
    """Check ``entry``'s local header against it; set its data offset; return where its data ends."""
    name = entry.name
    fp.seek(entry.header_offset)
    head = fp.read(LOCAL.size)
    if len(head) < LOCAL.size or head[:4] != SIG_LOCAL:
        raise ArchiveFormatError("local header is missing or damaged.", archive=archive, member=name)
    _sig, _needed, flags, method, _time, _date, crc, csize, usize, nlen, xlen = LOCAL.unpack(head)
    local_name = fp.read(nlen)
    if local_name != entry.raw_name:
        # The local header must name the same member: a directory entry renamed or pointed at
        # another member's data would otherwise load under the wrong name.
        raise ArchiveFormatError(
            f"local header names {local_name[:80]!r}, the central directory {entry.raw_name[:80]!r} "
            "(corrupted or forged).",
            archive=archive,
            member=name,
            hint=HINT,
        )
    if flags != entry.flags or method != entry.method:
        raise refuse(
            f"local header says flags {flags:#06x} and method {method}, the central directory flags "
            f"{entry.flags:#06x} and method {entry.method}.",
            archive,
            name,
        )
    extra = fp.read(xlen)
    if len(extra) != xlen:
        raise ArchiveFormatError("local header is missing or damaged.", archive=archive, member=name)
    zip64 = extras(extra, archive, name, "local header's").get(ZIP64_ID)
    if zip64 is not None:
        if len(zip64) != 16:
            raise refuse(f"local zip64 extra field holds {len(zip64)} bytes, not 16 (both sizes).", archive, name)
        big_usize, big_csize = struct.unpack("<QQ", zip64)
        for small, big in ((usize, big_usize), (csize, big_csize)):
            if small not in (_U32, big):
                raise refuse(
                    f"local header's sizes disagree: {small} in the header, {big} in its zip64 field.", archive, name
                )
        usize, csize = big_usize, big_csize
    found = (crc, csize, usize)
    wanted = (entry.crc, entry.compress_size, entry.file_size)
    if found != wanted and not (
        entry.flags & FLAG_DESCRIPTOR and all(f in (0, w) for f, w in zip(found, wanted, strict=True))
    ):
        raise refuse(
            f"local header says crc32 {crc:08x}, {csize} compressed and {usize} uncompressed bytes; the central "
            f"directory crc32 {entry.crc:08x}, {entry.compress_size} and {entry.file_size}.",
            archive,
            name,
        )
    entry.data_offset = entry.header_offset + LOCAL.size + nlen + xlen
    return entry.data_offset + entry.compress_size


#: A data descriptor's length tells its form: (signature?, struct of crc32 and both sizes).
_DESCRIPTORS = {12: (False, "<III"), 16: (True, "<III"), 20: (False, "<IQQ"), 24: (True, "<IQQ")}


def _check_descriptor(fp: IO[bytes], entry: Entry, at: int, following: int, archive: Any) -> int:
    """The data descriptor after ``entry``'s data must fill the bytes up to what follows it
    and repeat the central directory's CRC-32 and sizes; return where it ends."""
    form = _DESCRIPTORS.get(following - at)
    fp.seek(at)
    raw = fp.read(24)
    if form is not None:
        signed, fmt = form
        if (not signed or raw[:4] == SIG_DESCRIPTOR) and len(raw) >= following - at:
            if struct.unpack_from(fmt, raw, 4 if signed else 0) == (entry.crc, entry.compress_size, entry.file_size):
                return following
    raise refuse(
        f"is followed by {following - at} bytes where its data descriptor should be: the descriptor is "
        "missing, disagrees with the central directory, or hides other data.",
        archive,
        entry.name,
    )
