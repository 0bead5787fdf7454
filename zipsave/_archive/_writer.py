"""Writing a zip archive: stored members aligned for in-place reads, CRC-32/SHA-256 hashed
while the bytes stream out, fixed timestamps, and ``manifest.json`` last."""

from __future__ import annotations

import contextlib
import hashlib
import io
import struct
import threading
from collections.abc import Iterator
from typing import IO, Any

from .. import _archive, _format  # _archive: the helper threads of large members, on first use
from .._json_write import pretty_json
from ..exceptions import ArchiveFormatError
from . import _crc
from ._zipfmt import (
    ALIGN_ID,
    CENTRAL,
    DESCRIPTOR64,
    DOS_DATE,
    EOCD,
    EOCD64,
    EXTERNAL_ATTR,
    FLAG_DESCRIPTOR,
    FLAG_UTF8,
    LOCAL,
    LOCATOR64,
    MADE_BY,
    VERSION_NEEDED,
    ZIP64_ID,
)

__all__ = ["ArchiveWriter", "MemberInfo"]


class MemberInfo:
    """What the writer recorded about one member; becomes a manifest entry.

    ``records`` (``.pth`` members) maps each stored record of torch's inner zip to
    ``{"offset", "size", "crc32"}``: the per-tensor checksums of ``manifest.json``. (A plain
    class: a dataclass compiles its methods at import, time every first save paid.)
    """

    __slots__ = ("name", "size", "crc32", "sha256", "records")

    def __init__(
        self, name: str, size: int, crc32: int, sha256: str | None, records: dict[str, dict[str, Any]] | None = None
    ) -> None:
        self.name = name
        self.size = size
        self.crc32 = crc32
        self.sha256 = sha256
        self.records = records

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not MemberInfo:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    def __hash__(self) -> int:
        return hash((self.name, self.size, self.crc32, self.sha256))

    def __repr__(self) -> str:
        return "MemberInfo(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__) + ")"


class _Hasher:
    """CRC-32 (zip's own check) and optionally SHA-256 (the manifest's) of one member.

    Large buffers are hashed on the helper threads of :mod:`._crc_pool` while the calling
    thread writes them: the CRC in pieces on both helpers, the SHA-256 (inherently serial)
    on one. Each large buffer gets its own CRC (returned, so a caller can keep per-tensor
    checksums for free) and is folded into the member's with :func:`~._crc_pool.crc32_combine`.
    """

    def __init__(self, sha256: bool) -> None:
        self.crc = 0
        self.size = 0
        self._sha = hashlib.sha256() if sha256 else None

    def write_through(self, buf: memoryview, write: Any) -> int | None:
        """Write ``buf`` with ``write`` and hash it; both run at once for large buffers.

        Returns the CRC-32 of ``buf`` alone for a large buffer, ``None`` for a small one
        (folded inline into the member's CRC). The buffer may be freed by the caller as soon
        as this returns (torch hands us temporaries for tensors it first copies off a GPU),
        so the hashes finish before it does.
        """
        n = buf.nbytes
        if n < _crc.PARALLEL_MIN:
            self.crc = _crc.crc32(buf, self.crc)
            if self._sha is not None:
                self._sha.update(buf)
            write(buf)
            self.size += n
            return None
        ordered = _archive.OrderedCrc()
        sha_job = None
        try:
            ordered.feed(buf)
            if self._sha is not None:
                sha_job = _archive.pool_submit(self._sha.update, buf)
            write(buf)
        except BaseException:
            ordered.cancel()
            raise
        finally:
            if sha_job is not None:
                sha_job.result()
        piece = ordered.value()
        self.crc = _archive.crc32_combine(self.crc, piece, n)
        self.size += n
        return piece

    def info(self, name: str) -> MemberInfo:
        return MemberInfo(name, self.size, self.crc, self._sha.hexdigest() if self._sha else None)


class _Entry:
    __slots__ = ("info", "offset", "flags", "padding")

    def __init__(self, info: MemberInfo, offset: int, flags: int, padding: bytes) -> None:
        self.info = info
        self.offset = offset
        self.flags = flags
        self.padding = padding


class _MemberStream(io.RawIOBase):
    """A write-only stream into one stored member (what ``torch.save`` writes to).

    Large writes (tensor storages) go straight through as memoryviews, never copied. Small
    ones (torch writes record headers and padding a few bytes at a time) are gathered and
    hashed and written together, which saves a Python round trip per piece.
    :meth:`write_checked` also returns a large write's own CRC-32, and a caller that knows
    the member's inner layout sets :attr:`records` (per-tensor checksums for the manifest).
    """

    _GATHER = 64 << 10

    def __init__(self, writer: ArchiveWriter, hasher: _Hasher) -> None:
        self._writer = writer
        self._hasher = hasher
        self._pending = bytearray()
        #: ``{record: {"offset", "size", "crc32"}}`` for the manifest, set by the caller.
        self.records: dict[str, dict[str, Any]] | None = None

    def writable(self) -> bool:
        return True

    def write_checked(self, b: Any) -> tuple[int, int | None]:
        """Write ``b``; return its size and, when it went straight through, its CRC-32."""
        view = memoryview(b)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        n = view.nbytes
        if n < self._GATHER:
            self._pending += view
            if len(self._pending) >= self._GATHER:
                self.flush()
            return n, None
        self.flush()
        return n, self._hasher.write_through(view, self._writer._write)

    def write(self, b: Any) -> int:
        return self.write_checked(b)[0]

    def tell(self) -> int:
        return self._hasher.size + len(self._pending)

    def flush(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, bytearray()
            self._hasher.write_through(memoryview(pending), self._writer._write)


class ArchiveWriter:
    """Writes a zip archive member by member, deterministically.

    Every member is stored (no compression), carries the fixed timestamp, and starts its data
    on an ``ALIGNMENT`` boundary of the output. Sizes and CRCs are patched into the local
    header afterwards when the output can seek, and written as a data descriptor when it
    cannot (pipes, remote uploads).

    Parameters
    ----------
    fp
        A writable binary file object. It is neither closed nor truncated.
    sha256
        Which members get a SHA-256 in the manifest besides their size and CRC-32: ``None``
        (the default) hashes the members written whole from memory (``data``, ``init.json``,
        ...) but not the streamed ones (``.pth``, ``.npy``: the tensors), ``True`` every
        member, ``False`` none. SHA-256 runs at about 1.5 GB/s on one core, three times
        slower than writing, so hashing the tensors would triple the time of a large save;
        their CRC-32 (computed on helper threads while writing) is checked on every load.
    """

    def __init__(self, fp: IO[bytes], *, sha256: bool | None = None) -> None:
        self._fp = fp
        try:
            self._base = fp.tell()
            self._seekable = bool(fp.seekable())
        except (AttributeError, OSError, ValueError):
            self._base, self._seekable = 0, False
        self._pos = 0
        self.current: str | None = None
        self._entries: list[_Entry] = []
        self._names: set[str] = set()
        self._sha256_whole = sha256 is not False
        self._sha256_streamed = sha256 is True
        self._open = False

    # -- low level -------------------------------------------------------------------------
    def _write(self, data: Any) -> None:
        view = memoryview(data)
        written = self._fp.write(view)
        if written is not None and written != view.nbytes:
            # Raw files may write short; loop until everything is out.
            view = view.cast("B")[written:]
            while view.nbytes:
                n = self._fp.write(view)
                view = view[n:]
        self._pos += memoryview(data).nbytes

    def _start_member(self, name: str, streamed: bool, size: int, crc: int) -> _Entry:
        if self._open:
            raise RuntimeError("another member is still open")
        if name in self._names:
            raise ArchiveFormatError("member written twice while saving.", member=name)
        self._names.add(name)
        self.current = name  # named by the error if the storage fails while it is written
        encoded = name.encode("utf-8")
        flags = FLAG_UTF8 if not encoded.isascii() else 0
        if streamed and not self._seekable:
            flags |= FLAG_DESCRIPTOR
        zip64 = b""
        if streamed:
            # Reserve room for 64-bit sizes: the final size is unknown until the end.
            zip64 = struct.pack("<HHQQ", ZIP64_ID, 16, 0, 0)
        head_len = LOCAL.size + len(encoded) + len(zip64)
        pad = -(self._base + self._pos + head_len) % _format.ALIGNMENT
        if 0 < pad < 4:
            pad += _format.ALIGNMENT
        padding = struct.pack("<HH", ALIGN_ID, pad - 4) + bytes(pad - 4) if pad else b""
        extra = zip64 + padding
        offset = self._pos
        small = 0xFFFFFFFF if streamed else size
        self._write(
            LOCAL.pack(
                0x04034B50,
                VERSION_NEEDED,
                flags,
                0,
                0,
                DOS_DATE,
                0 if streamed else crc,
                small,
                small,
                len(encoded),
                len(extra),
            )
        )
        self._write(encoded)
        self._write(extra)
        return _Entry(MemberInfo(name, size, crc, None), offset, flags, padding)

    # -- members ---------------------------------------------------------------------------
    def write_bytes(self, name: str, data: bytes) -> MemberInfo:
        """Write a whole member held in memory."""
        hasher = _Hasher(self._sha256_whole)
        hasher.write_through(memoryview(data), lambda _buf: None)
        info = hasher.info(name)
        entry = self._start_member(name, False, info.size, info.crc32)
        self._write(data)
        entry.info = info
        self._entries.append(entry)
        return entry.info

    @contextlib.contextmanager
    def open_member(self, name: str) -> Iterator[_MemberStream]:
        """Stream one member: ``with writer.open_member("policy.pth") as f: torch.save(sd, f)``."""
        entry = self._start_member(name, True, 0, 0)
        data_start = self._pos
        hasher = _Hasher(self._sha256_streamed)
        stream = _MemberStream(self, hasher)
        self._open = True
        try:
            yield stream
            stream.flush()
        finally:
            self._open = False
        done = hasher.info(name)
        info = MemberInfo(done.name, done.size, done.crc32, done.sha256, stream.records)
        entry.info = info
        if entry.flags & FLAG_DESCRIPTOR:
            self._write(DESCRIPTOR64.pack(0x08074B50, info.crc32, info.size, info.size))
        else:
            end = self._base + self._pos
            self._fp.seek(self._base + entry.offset + 14)
            self._fp.write(struct.pack("<I", info.crc32))
            # The zip64 extra sits right after the name; patch its two sizes.
            self._fp.seek(self._base + data_start - len(entry.padding) - 16)
            self._fp.write(struct.pack("<QQ", info.size, info.size))
            self._fp.seek(end)
        self._entries.append(entry)

    def write_manifest(
        self, app_state: list[str] | None = None, state_dict_values: dict[str, int] | None = None
    ) -> MemberInfo:
        """Write ``manifest.json`` describing every member written so far, the folders saved
        as app state (``app_state``) and the ``.pth`` members saved from state dicts given as
        values, each with its place among the keys of its app state (``state_dict_values``),
        each written only when it has any."""
        members: dict[str, dict[str, Any]] = {}
        for e in self._entries:
            entry: dict[str, Any] = {"size": e.info.size, "crc32": f"{e.info.crc32:08x}", "sha256": e.info.sha256}
            if e.info.records is not None:
                entry["records"] = e.info.records
            members[e.info.name] = entry
        manifest: dict[str, Any] = {
            "format": _format.FORMAT_NAME,
            "format_version": _format.FORMAT_VERSION,
            "members": members,
        }
        if app_state:
            manifest[_format.MANIFEST_APP_STATE] = sorted(app_state)
        if state_dict_values:
            manifest[_format.MANIFEST_STATE_DICT_VALUES] = dict(sorted(state_dict_values.items()))
        return self.write_bytes(_format.MANIFEST, pretty_json(manifest))

    def close(self) -> None:
        """Write the central directory; the archive is complete afterwards."""
        cd_start = self._pos
        for e in self._entries:
            encoded = e.info.name.encode("utf-8")
            needs64 = [v for v in (e.info.size, e.info.size, e.offset) if v >= 0xFFFFFFFF]
            extra = struct.pack(f"<HH{len(needs64)}Q", ZIP64_ID, 8 * len(needs64), *needs64) if needs64 else b""
            size32 = min(e.info.size, 0xFFFFFFFF)
            self._write(
                CENTRAL.pack(
                    0x02014B50,
                    MADE_BY,
                    VERSION_NEEDED,
                    e.flags,
                    0,
                    0,
                    DOS_DATE,
                    e.info.crc32,
                    size32,
                    size32,
                    len(encoded),
                    len(extra),
                    0,
                    0,
                    0,
                    EXTERNAL_ATTR,
                    min(e.offset, 0xFFFFFFFF),
                )
            )
            self._write(encoded)
            self._write(extra)
        cd_size = self._pos - cd_start
        count = len(self._entries)
        if count >= 0xFFFF or cd_start >= 0xFFFFFFFF or cd_size >= 0xFFFFFFFF:
            eocd64 = self._pos
            self._write(EOCD64.pack(0x06064B50, 44, MADE_BY, VERSION_NEEDED, 0, 0, count, count, cd_size, cd_start))
            self._write(LOCATOR64.pack(0x07064B50, 0, eocd64, 1))
        self._write(
            EOCD.pack(
                0x06054B50,
                0,
                0,
                min(count, 0xFFFF),
                min(count, 0xFFFF),
                min(cd_size, 0xFFFFFFFF),
                min(cd_start, 0xFFFFFFFF),
                0,
            )
        )
        self._fp.flush()

    def abort(self) -> None:
        """Give up after an error (helper threads never outlive a member, so nothing to stop)."""

    @property
    def members(self) -> list[MemberInfo]:
        return [e.info for e in self._entries]


# -- atomic output -----------------------------------------------------------------------------
_umask_lock = threading.Lock()
