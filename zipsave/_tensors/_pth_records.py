"""Per-tensor checksums of a ``.pth`` member, checked on reads: each stored record's offset,
size and CRC-32, as ``_pth_write``'s :class:`~zipsave._tensors._pth_write.RecordingStream` took
them from the write calls ``torch.save`` makes (torch imported only to read a record into a
tensor: ``zipsave inspect --verify`` checks without it)."""

from __future__ import annotations

import mmap as _mmap
from typing import TYPE_CHECKING, Any

from .. import _archive  # _archive: the threaded CRC-32 of large records, on first use
from .._archive import crc32
from ..exceptions import ArchiveFormatError, IntegrityError

if TYPE_CHECKING:
    import torch

__all__ = [
    "check_member",
    "check_record",
    "check_stored_record",
    "read_record",
    "record_table",
    "verify_pickle",
]


def record_table(entry: dict | None) -> dict[str, dict[str, Any]] | None:
    """The per-record checksums of a manifest entry, or ``None`` (format-1 archives written
    before they existed, SB3's archives, or a malformed field)."""
    if not isinstance(entry, dict):
        return None
    table = entry.get("records")
    if not isinstance(table, dict):
        return None
    for rec in table.values():
        if not (
            isinstance(rec, dict)
            and isinstance(rec.get("offset"), int)
            and isinstance(rec.get("size"), int)
            and isinstance(rec.get("crc32"), str)
        ):
            return None
    return table


def check_record(table: dict, name: str, start: int, length: int, actual: int, *, tensors: str = "") -> None:
    """Compare one record's place and CRC-32 with the manifest; raise :class:`IntegrityError`
    naming the record and the tensors that use it."""
    rec = table.get(name)
    what = f"record `{name}`" + (f" (tensor {tensors})" if tensors else "")
    if rec is None:
        raise IntegrityError(f"{what} is not listed in manifest.json's per-tensor checksums (added after saving?).")
    if rec["offset"] != start or rec["size"] != length:
        raise IntegrityError(
            f"{what} lies at offset {start}, {length} bytes; manifest.json records offset {rec['offset']}, "
            f"{rec['size']} bytes (corrupted or rewritten)."
        )
    if f"{actual:08x}" != rec["crc32"]:
        raise IntegrityError(
            f"{what}: CRC-32 {actual:08x} does not match the recorded {rec['crc32']} (corrupted).",
            expected=f"crc32 {rec['crc32']}",
            found=f"crc32 {actual:08x}",
        )


def verify_pickle(view: Any, meta: Any, table: dict) -> None:
    """Check the ``data.pkl`` record the metadata was parsed from (the tensors' names,
    shapes and dtypes) against its per-record CRC-32."""
    start, size = meta.pickle
    buf = bytearray(size)
    if view.read_at(start, buf) != size:
        raise IntegrityError("ends inside `data.pkl` (truncated).")
    check_record(table, "data.pkl", start, size, crc32(buf))


def check_member(view: Any, expected: int) -> None:
    """Read a whole member once and compare its CRC-32 with ``expected`` (the zip
    directory's): the check for archives without per-tensor checksums."""
    crc = _archive.OrderedCrc()
    pos = 0
    pieces = []
    try:
        while pos < view.size:
            buf = bytearray(min(16 << 20, view.size - pos))
            if view.read_at(pos, buf) != len(buf):
                raise ArchiveFormatError("ends early (truncated).")
            crc.feed(buf)
            pieces.append(buf)  # alive until the helper threads are done with it
            pos += len(buf)
            if len(pieces) > 2:
                crc.wait()
                pieces.clear()
        found = crc.value()
    except BaseException:
        crc.cancel()
        raise
    if found != expected:
        raise IntegrityError(
            f"CRC-32 {found:08x} does not match the recorded {expected:08x} (corrupted). The archive has no "
            "per-tensor checksums, so the whole member was checked."
        )


def _map(view: Any, start: int, length: int) -> torch.Tensor | None:
    """The record as a private (copy-on-write) map of the archive file, or ``None`` where it
    cannot be mapped (no file descriptor, not 64-byte aligned, a deflated member's spool)."""
    import torch

    fd = getattr(view, "_fd", None)
    if fd is None or not length or (view.start + start) % 64:
        return None
    try:
        mapped = _mmap.mmap(fd, 0, access=_mmap.ACCESS_COPY)
    except (OSError, ValueError):
        return None
    return torch.frombuffer(mapped, dtype=torch.uint8, count=length, offset=view.start + start)


def read_record(
    view: Any,
    meta: Any,
    key: str,
    *,
    table: dict | None,
    member_crc: int | None,
    tensors: str = "",
    mmap: bool = False,
) -> torch.Tensor:
    """One storage record's bytes as a ``uint8`` tensor, checked: against its own CRC-32 when
    the manifest has per-tensor checksums (``table``), else by the whole member's CRC-32
    (``member_crc``); ``None`` for both reads it unchecked. With ``mmap`` the tensor is backed
    by the archive's own pages where the record can be mapped (copied otherwise)."""
    import torch

    start, length = meta.records[key]
    mapped = _map(view, start, length) if mmap else None
    if mapped is not None:
        buf = mapped
    else:
        buf = torch.empty(length, dtype=torch.uint8)
        if length and view.read_at(start, buf.numpy()) != length:
            raise ArchiveFormatError(f"ends inside storage record `{key}` (truncated).")
    if table is not None:
        verify_pickle(view, meta, table)
        # a mapped record is checked from the file, so the check leaves none of its pages resident
        crc = _archive.crc32_read(view.read_at, [(start, length)])[0] if mapped is not None else crc32(buf.numpy().data)
        if crc is None:
            raise ArchiveFormatError(f"ends inside storage record `{key}` (truncated).")
        check_record(table, "data/" + key, start, length, crc, tensors=tensors)
    elif member_crc is not None:
        check_member(view, member_crc)
    return buf


def check_stored_record(view: Any, meta: Any, key: str, *, table: dict, tensors: str = "") -> None:
    """Check one storage record against its per-record CRC-32 as :func:`read_record` does (the
    same errors, in the same order), reading it in pieces that are not kept: no tensor made."""
    start, length = meta.records[key]
    crc = _archive.crc32_read(view.read_at, [(start, length)])[0]
    if crc is None:
        raise ArchiveFormatError(f"ends inside storage record `{key}` (truncated).")
    verify_pickle(view, meta, table)
    check_record(table, "data/" + key, start, length, crc, tensors=tensors)
