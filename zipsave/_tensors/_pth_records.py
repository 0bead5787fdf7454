"""Per-tensor checksums of a ``.pth`` member: each stored record's offset, size and CRC-32,
taken from the write calls ``torch.save`` makes (no second pass), and checked on reads (torch
imported only to read a record into a tensor: ``zipsave inspect --verify`` checks without it)."""

from __future__ import annotations

import bisect
import io
import mmap as _mmap
import zipfile
from typing import TYPE_CHECKING, Any

from .._archive import OrderedCrc, crc32, crc32_read
from ..exceptions import ArchiveFormatError, IntegrityError

if TYPE_CHECKING:
    import torch

__all__ = [
    "RecordingStream",
    "check_member",
    "check_record",
    "check_stored_record",
    "read_record",
    "record_table",
    "verify_pickle",
]

#: Writes up to this size are kept (local headers, the central directory) to find records.
_KEEP = 4096


class RecordingStream(io.RawIOBase):
    """Passes ``torch.save``'s writes to the archive's member stream and notes, for each
    write, its offset, size and CRC-32 (the stream's own for large writes, which it hashes
    anyway on its helper threads; computed here for small ones) and the bytes of tiny ones.

    torch writes every record's data with one call (miniz's ``m_pWrite``), so a record is
    one logged write; :meth:`records` finds them from the inner zip's directory.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._checked = getattr(stream, "write_checked", None)
        self._pos = 0
        self._offsets: list[int] = []
        self._writes: list[tuple[int, int]] = []  # (size, crc)
        self._kept: dict[int, bytes] = {}

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        view = memoryview(b)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        if self._checked is not None:
            n, crc = self._checked(view)
        else:
            n, crc = self._stream.write(view), None
        if crc is None:
            crc = crc32(view)
        if n <= _KEEP:
            self._kept[self._pos] = bytes(view)
        self._offsets.append(self._pos)
        self._writes.append((n, crc))
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        self._stream.flush()

    def records(self) -> dict[str, dict[str, Any]] | None:
        """``{inner name: {"offset", "size", "crc32"}}`` for every record of the inner zip
        (its top folder stripped: ``data.pkl``, ``data/0``), or ``None`` when a record was
        not written as one call (then readers check the whole member instead)."""
        try:
            with zipfile.ZipFile(_Sparse(self._kept, self._pos)) as inner:
                infos = inner.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, IndexError, KeyError):
            return None
        table: dict[str, dict[str, Any]] = {}
        for info in infos:
            head = self._kept.get(info.header_offset)
            if head is None or len(head) < 30 or head[:4] != b"PK\x03\x04" or info.compress_size != info.file_size:
                return None
            start = (
                info.header_offset + 30 + int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little")
            )
            if info.file_size == 0:
                crc = 0
            else:
                i = bisect.bisect_left(self._offsets, start)
                if i == len(self._offsets) or self._offsets[i] != start or self._writes[i][0] != info.file_size:
                    return None
                crc = self._writes[i][1]
            table[info.filename.partition("/")[2] or info.filename] = {
                "offset": start,
                "size": info.file_size,
                "crc32": f"{crc:08x}",
            }
        return table


class _Sparse(io.RawIOBase):
    """The kept small writes as a read-only file; reading a byte that was not kept fails."""

    def __init__(self, kept: dict[int, bytes], size: int) -> None:
        super().__init__()
        self._kept = kept
        self._starts = sorted(kept)
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, b: Any) -> int:
        out = memoryview(b).cast("B")
        want = max(0, min(out.nbytes, self._size - self._pos))
        done = 0
        while done < want:
            pos = self._pos + done
            i = bisect.bisect_right(self._starts, pos) - 1
            if i < 0:
                raise OSError("not kept")
            start = self._starts[i]
            chunk = self._kept[start]
            if pos >= start + len(chunk):
                raise OSError("not kept")
            piece = chunk[pos - start : pos - start + want - done]
            out[done : done + len(piece)] = piece
            done += len(piece)
        self._pos += done
        return done


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
    crc = OrderedCrc()
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
        crc = crc32_read(view.read_at, [(start, length)])[0] if mapped is not None else crc32(buf.numpy().data)
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
    crc = crc32_read(view.read_at, [(start, length)])[0]
    if crc is None:
        raise ArchiveFormatError(f"ends inside storage record `{key}` (truncated).")
    verify_pickle(view, meta, table)
    check_record(table, "data/" + key, start, length, crc, tensors=tensors)
