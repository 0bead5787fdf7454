"""Zip reading and writing: aligned stored members, hashing overlapped with writing,
atomic replacement of the target file, the manifest, and the limits that keep hostile
archives from hurting the reader.

This layer knows zip files and bytes; it knows nothing about models, JSON values or torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import itertools
import os
import shutil
import struct
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Iterator
from typing import IO, Any

import orjson

from . import _crc, _format, _json
from .exceptions import (
    ArchiveFormatError,
    ArchiveLimitError,
    IntegrityError,
    ZipsaveError,
)

__all__ = ["ArchiveReader", "ArchiveWriter", "Limits", "MemberInfo", "atomic_output", "open_input"]

_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_EOCD = struct.Struct("<IHHHHIIH")
_EOCD64 = struct.Struct("<IQHHIIQQQQ")
_LOCATOR64 = struct.Struct("<IIQI")
_DESCRIPTOR64 = struct.Struct("<IIQQ")
_ZIP64_ID = 0x0001
_ALIGN_ID = 0xD935  # the id Android's zipalign uses for padding
_VERSION_NEEDED = 45  # zip64 members
_MADE_BY = (3 << 8) | 45  # Unix, so zip tools extract with normal permissions
_EXTERNAL_ATTR = (0o100644 & 0xFFFF) << 16
_DOS_DATE = ((_format.DATE_TIME[0] - 1980) << 9) | (_format.DATE_TIME[1] << 5) | _format.DATE_TIME[2]
_FLAG_DESCRIPTOR = 0x08
_FLAG_UTF8 = 0x800
_READ_CHUNK = 16 << 20


@dataclasses.dataclass(frozen=True)
class Limits:
    """Safety limits applied while reading an archive.

    Every limit is a plain number and can be raised for archives you trust, e.g.
    ``zipsave.load(path, limits=zipsave.Limits(max_json_bytes=4 << 30))``.

    Attributes
    ----------
    max_members
        Most members an archive may hold.
    max_member_bytes
        Largest uncompressed size of one member.
    max_total_bytes
        Largest sum of the uncompressed sizes of all members.
    max_json_bytes
        Largest JSON member (``data``, ``init.json``, ``manifest.json``).
    max_json_depth
        Deepest nesting of JSON arrays/objects accepted while decoding.
    max_compression_ratio
        Largest uncompressed/compressed ratio of a deflated member above 1 MiB.
    """

    max_members: int = 100_000
    max_member_bytes: int = 1 << 40
    max_total_bytes: int = 1 << 42
    max_json_bytes: int = 512 << 20
    max_json_depth: int = 500
    max_compression_ratio: float = 200.0


DEFAULT_LIMITS = Limits()


@dataclasses.dataclass(frozen=True)
class MemberInfo:
    """What the writer recorded about one member; becomes a manifest entry."""

    name: str
    size: int
    crc32: int
    sha256: str | None


class _Hasher:
    """CRC-32 (zip's own check) and optionally SHA-256 (the manifest's) of one member.

    Large buffers are hashed on the helper threads of :mod:`zipsave._crc` while the calling
    thread writes them: the CRC in pieces on both helpers, the SHA-256 (inherently serial)
    on one.
    """

    def __init__(self, sha256: bool) -> None:
        self._crc = _crc.OrderedCrc()
        self._sha = hashlib.sha256() if sha256 else None

    @property
    def size(self) -> int:
        return self._crc.size

    def write_through(self, buf: memoryview, write: Any) -> None:
        """Write ``buf`` with ``write`` and hash it; both run at once for large buffers.

        The buffer may be freed by the caller as soon as this returns (torch hands us
        temporaries for tensors it first copies off a GPU), so the hashes finish before it does.
        """
        sha_job = None
        try:
            self._crc.feed(buf)
            if self._sha is not None:
                if buf.nbytes >= _crc.PARALLEL_MIN:
                    sha_job = _crc.pool().submit(self._sha.update, buf)
                else:
                    self._sha.update(buf)
            write(buf)
        except BaseException:
            self._crc.cancel()
            raise
        finally:
            if sha_job is not None:
                sha_job.result()
        self._crc.wait()

    def info(self, name: str) -> MemberInfo:
        return MemberInfo(name, self.size, self._crc.value(), self._sha.hexdigest() if self._sha else None)


@dataclasses.dataclass
class _Entry:
    info: MemberInfo
    offset: int
    flags: int
    padding: bytes


class _MemberStream(io.RawIOBase):
    """A write-only stream into one stored member (what ``torch.save`` writes to).

    Large writes (tensor storages) go straight through as memoryviews, never copied. Small
    ones (torch writes record headers and padding a few bytes at a time) are gathered and
    hashed and written together, which saves a Python round trip per piece.
    """

    _GATHER = 64 << 10

    def __init__(self, writer: ArchiveWriter, hasher: _Hasher) -> None:
        self._writer = writer
        self._hasher = hasher
        self._pending = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        view = memoryview(b)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        n = view.nbytes
        if n < self._GATHER:
            self._pending += view
            if len(self._pending) >= self._GATHER:
                self.flush()
        else:
            self.flush()
            self._hasher.write_through(view, self._writer._write)
        return n

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
        encoded = name.encode("utf-8")
        flags = _FLAG_UTF8 if not encoded.isascii() else 0
        if streamed and not self._seekable:
            flags |= _FLAG_DESCRIPTOR
        zip64 = b""
        if streamed:
            # Reserve room for 64-bit sizes: the final size is unknown until the end.
            zip64 = struct.pack("<HHQQ", _ZIP64_ID, 16, 0, 0)
        head_len = _LOCAL.size + len(encoded) + len(zip64)
        pad = -(self._base + self._pos + head_len) % _format.ALIGNMENT
        if 0 < pad < 4:
            pad += _format.ALIGNMENT
        padding = struct.pack("<HH", _ALIGN_ID, pad - 4) + bytes(pad - 4) if pad else b""
        extra = zip64 + padding
        offset = self._pos
        small = 0xFFFFFFFF if streamed else size
        self._write(
            _LOCAL.pack(
                0x04034B50, _VERSION_NEEDED, flags, 0, 0, _DOS_DATE,
                0 if streamed else crc, small, small, len(encoded), len(extra),
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
        info = hasher.info(name)
        entry.info = info
        if entry.flags & _FLAG_DESCRIPTOR:
            self._write(_DESCRIPTOR64.pack(0x08074B50, info.crc32, info.size, info.size))
        else:
            end = self._base + self._pos
            self._fp.seek(self._base + entry.offset + 14)
            self._fp.write(struct.pack("<I", info.crc32))
            # The zip64 extra sits right after the name; patch its two sizes.
            self._fp.seek(self._base + data_start - len(entry.padding) - 16)
            self._fp.write(struct.pack("<QQ", info.size, info.size))
            self._fp.seek(end)
        self._entries.append(entry)

    def write_manifest(self) -> MemberInfo:
        """Write ``manifest.json`` describing every member written so far."""
        members = {
            e.info.name: {"size": e.info.size, "crc32": f"{e.info.crc32:08x}", "sha256": e.info.sha256}
            for e in self._entries
        }
        manifest = {"format": _format.FORMAT_NAME, "format_version": _format.FORMAT_VERSION, "members": members}
        return self.write_bytes(_format.MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2))

    def close(self) -> None:
        """Write the central directory; the archive is complete afterwards."""
        cd_start = self._pos
        for e in self._entries:
            encoded = e.info.name.encode("utf-8")
            needs64 = [v for v in (e.info.size, e.info.size, e.offset) if v >= 0xFFFFFFFF]
            extra = struct.pack(f"<HH{len(needs64)}Q", _ZIP64_ID, 8 * len(needs64), *needs64) if needs64 else b""
            size32 = min(e.info.size, 0xFFFFFFFF)
            self._write(
                _CENTRAL.pack(
                    0x02014B50, _MADE_BY, _VERSION_NEEDED, e.flags, 0, 0, _DOS_DATE,
                    e.info.crc32, size32, size32, len(encoded), len(extra), 0, 0, 0,
                    _EXTERNAL_ATTR, min(e.offset, 0xFFFFFFFF),
                )
            )
            self._write(encoded)
            self._write(extra)
        cd_size = self._pos - cd_start
        count = len(self._entries)
        if count >= 0xFFFF or cd_start >= 0xFFFFFFFF or cd_size >= 0xFFFFFFFF:
            eocd64 = self._pos
            self._write(_EOCD64.pack(0x06064B50, 44, _MADE_BY, _VERSION_NEEDED, 0, 0, count, count, cd_size, cd_start))
            self._write(_LOCATOR64.pack(0x07064B50, 0, eocd64, 1))
        self._write(
            _EOCD.pack(
                0x06054B50, 0, 0, min(count, 0xFFFF), min(count, 0xFFFF),
                min(cd_size, 0xFFFFFFFF), min(cd_start, 0xFFFFFFFF), 0,
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


def _current_umask() -> int:
    """The process umask, read without changing it where Linux allows (``os.umask`` can only
    be read by setting it, which races with other threads creating files)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    with _umask_lock:
        umask = os.umask(0o022)
        os.umask(umask)
    return umask
@contextlib.contextmanager
def atomic_output(path: str, *, durable: bool = True) -> Iterator[IO[bytes]]:
    """Yield a temporary file beside ``path``; on success it replaces ``path`` atomically.

    A crash or an exception at any point leaves the previous file at ``path`` untouched and
    removes the temporary file (a SIGKILL may leave a ``.zipsave-tmp`` file behind, never a
    partial archive at ``path``).
    """
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".zipsave-tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        try:
            mode = os.stat(path).st_mode & 0o777
        except FileNotFoundError:
            mode = 0o666 & ~_current_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable and hasattr(os, "O_DIRECTORY"):
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


# -- reading -----------------------------------------------------------------------------------
def open_input(path: str) -> IO[bytes]:
    """Open ``path`` for reading; a missing file tries ``path + ".zip"`` (SB3's rule)."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        if not path.endswith(".zip"):
            try:
                return open(path + ".zip", "rb")
            except FileNotFoundError:
                pass
        raise ZipsaveError(
            "no such file (also tried with a `.zip` suffix).",
            archive=path,
            hint="Check the path, or pass an open binary file object.",
        ) from None
    except IsADirectoryError:
        raise ArchiveFormatError("is a directory, not a zip archive.", archive=path) from None


def _check_name(name: str, archive: Any) -> None:
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


class MemberView(io.RawIOBase):
    """A read-only, seekable window onto one stored member of the outer file.

    Reads go straight to the file at absolute offsets (``os.preadv`` where available), so
    nothing is decompressed, copied twice, or re-read to emulate a seek.
    """

    def __init__(self, fp: IO[bytes], start: int, size: int, lock: threading.Lock, *, owns: bool = False) -> None:
        super().__init__()
        self._fp = fp
        self._owns = owns
        self._start = start
        self._size = size
        self._pos = 0
        self._lock = lock
        fileno = None
        if hasattr(os, "preadv"):
            with contextlib.suppress(AttributeError, OSError, io.UnsupportedOperation):
                fileno = fp.fileno()
        self._fd = fileno

    @property
    def start(self) -> int:
        """Absolute offset of the member's first byte in the outer file."""
        return self._start

    @property
    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise ValueError("negative seek position")
        self._pos = pos
        return pos

    def read_at(self, offset: int, buf: Any) -> int:
        """Fill ``buf`` from member offset ``offset``; return how many bytes were read."""
        view = memoryview(buf).cast("B")
        want = max(0, min(view.nbytes, self._size - offset))
        if want == 0:
            return 0
        view = view[:want]
        done = 0
        while done < want:
            if self._fd is not None:
                n = os.preadv(self._fd, [view[done:]], self._start + offset + done)
            else:
                with self._lock:
                    self._fp.seek(self._start + offset + done)
                    n = self._fp.readinto(view[done:])  # type: ignore[attr-defined]
            if not n:
                break
            done += n
        return done

    def readinto(self, b: Any) -> int:
        n = self.read_at(self._pos, b)
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = max(0, self._size - self._pos)
        buf = bytearray(min(size, max(0, self._size - self._pos)))
        n = self.readinto(buf)
        return bytes(buf[:n])

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        """Close the view; the outer file stays open unless the view owns it (a spool)."""
        if not self.closed and self._owns:
            self._fp.close()
        super().close()


class ArchiveReader:
    """Reads and validates a zip archive: names, sizes, limits, hashes.

    Parameters
    ----------
    fp
        A readable, seekable binary file object (not closed here).
    archive
        What to call the archive in messages (its path, usually).
    limits
        The safety limits to enforce.
    """

    def __init__(self, fp: IO[bytes], *, archive: Any = None, limits: Limits = DEFAULT_LIMITS) -> None:
        self._fp = fp
        self.archive = archive
        self.limits = limits
        self._lock = threading.Lock()
        try:
            self._zip = zipfile.ZipFile(fp)
        except zipfile.BadZipFile as err:
            raise ArchiveFormatError(
                f"not a zip archive, or truncated ({err}).",
                archive=archive,
                hint="Was the file fully written and copied? zipsave archives are zip files.",
            ) from err
        except (OSError, ValueError, EOFError, struct.error, OverflowError, NotImplementedError, IndexError) as err:
            # zipfile parses the central directory without validating it; a forged one
            # surfaces as any of these.
            raise ArchiveFormatError(f"unreadable zip structure ({type(err).__name__}: {err}).", archive=archive) from err
        infos = self._zip.infolist()
        if len(infos) > limits.max_members:
            raise ArchiveLimitError(
                f"holds {len(infos)} members; the limit is {limits.max_members}.", archive=archive
            )
        self._infos: dict[str, zipfile.ZipInfo] = {}
        total = 0
        self._end = self._zip.start_dir
        self._check_end_record(fp, archive)
        for info in infos:
            name = info.filename
            _check_name(name, archive)
            if name in self._infos:
                raise ArchiveFormatError(
                    "appears twice in the archive; refusing to guess which copy is meant.",
                    archive=archive,
                    member=name,
                )
            if info.flag_bits & 0x41:
                raise ArchiveFormatError("is encrypted; zipsave does not read encrypted members.", archive=archive, member=name)
            if info.flag_bits & 0x20:
                raise ArchiveFormatError("uses compressed patched data (flag bit 5), which zipsave does not read.",
                                         archive=archive, member=name)
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise ArchiveFormatError(
                    f"uses compression method {info.compress_type}; expected stored (0) or deflated (8).",
                    archive=archive,
                    member=name,
                )
            if info.file_size > limits.max_member_bytes:
                raise ArchiveLimitError(
                    f"declares {info.file_size} bytes; the limit is {limits.max_member_bytes}.",
                    archive=archive,
                    member=name,
                )
            if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
                raise ArchiveFormatError(
                    f"is stored but declares {info.compress_size} compressed and {info.file_size} "
                    "uncompressed bytes.",
                    archive=archive,
                    member=name,
                )
            if info.header_offset < 0 or info.header_offset + _LOCAL.size + info.compress_size > self._end:
                raise ArchiveFormatError("extends past the start of the central directory (truncated or forged).", archive=archive, member=name)
            total += info.file_size
            self._infos[name] = info
        if total > limits.max_total_bytes:
            raise ArchiveLimitError(
                f"members total {total} bytes; the limit is {limits.max_total_bytes}.", archive=archive
            )
        self._check_overlaps(archive)
        self._offsets: dict[str, int] = {}
        self.manifest: dict[str, dict] | None = None
        self.manifest_error: str | None = None
        self._load_manifest()

    def _check_end_record(self, fp: IO[bytes], archive: Any) -> None:
        """The end-of-central-directory record must close the file.

        zipfile accepts the last end record it finds in the file's final 64 KiB. In a truncated
        zipsave archive that can be the end record of a ``.pth`` member's inner zip, which would
        silently open the wrong archive.
        """
        try:
            endrec = zipfile._EndRecData(fp)  # type: ignore[attr-defined]
            size = fp.seek(0, io.SEEK_END)
        except (OSError, ValueError) as err:
            raise ArchiveFormatError(f"unreadable zip structure ({err}).", archive=archive) from err
        if endrec is None:
            raise ArchiveFormatError("has no end-of-central-directory record (truncated).", archive=archive)
        location = endrec[zipfile._ECD_LOCATION]  # type: ignore[attr-defined]
        comment = endrec[zipfile._ECD_COMMENT_SIZE]  # type: ignore[attr-defined]
        end_of_record = location + 22 + comment
        # zipfile reads the directory by its byte size and never compares the entry count;
        # a damaged name or comment length there silently hides the members after it.
        listed = endrec[zipfile._ECD_ENTRIES_TOTAL]  # type: ignore[attr-defined]
        if listed != len(self._zip.infolist()):
            raise ArchiveFormatError(
                f"central directory holds {len(self._zip.infolist())} entries, but its end record "
                f"counts {listed} (corrupted or forged).",
                archive=archive,
            )
        if location != size - 22 - comment and end_of_record != size:
            raise ArchiveFormatError(
                f"ends {size - end_of_record} bytes after its end-of-central-directory record; "
                "the archive is truncated or has trailing data.",
                archive=archive,
                hint="Was the file fully written and copied?",
            )

    def _check_overlaps(self, archive: Any) -> None:
        """Members must not share bytes: overlapping entries are how a 40 KB zip expands to
        gigabytes (a "non-recursive" zip bomb), and zipsave never writes them."""
        ordered = sorted(self._infos.values(), key=lambda i: i.header_offset)
        for first, second in itertools.pairwise(ordered):
            if first.header_offset + _LOCAL.size + first.compress_size > second.header_offset:
                raise ArchiveFormatError(
                    f"overlaps member `{second.filename}` (a zip bomb, or a forged directory).",
                    archive=archive,
                    member=first.filename,
                )

    # -- listing ---------------------------------------------------------------------------
    def names(self) -> list[str]:
        return list(self._infos)

    def __contains__(self, name: str) -> bool:
        return name in self._infos

    def info(self, name: str) -> zipfile.ZipInfo:
        try:
            return self._infos[name]
        except KeyError:
            raise ArchiveFormatError("no such member.", archive=self.archive, member=name) from None

    # -- manifest --------------------------------------------------------------------------
    def _load_manifest(self) -> None:
        if _format.MANIFEST not in self._infos:
            return
        try:
            raw = self.read(_format.MANIFEST, limit=self.limits.max_json_bytes, verify=False)
            manifest = _json.loads(raw, max_depth=self.limits.max_json_depth)
            members = manifest["members"]
            if not isinstance(members, dict):
                raise TypeError("`members` is not an object")
            self.manifest = members
        except (ZipsaveError, KeyError, TypeError) as err:
            self.manifest_error = f"manifest.json is unreadable ({err})"

    def expected(self, name: str) -> dict | None:
        """The manifest entry of ``name`` (``None`` when the archive has no manifest)."""
        if self.manifest is None:
            return None
        entry = self.manifest.get(name)
        return entry if isinstance(entry, dict) else None

    def check_recorded(self, name: str) -> None:
        """Compare the zip directory's size and CRC of ``name`` with the manifest (no reading)."""
        entry = self.expected(name)
        if self.manifest is not None and entry is None and name != _format.MANIFEST:
            raise IntegrityError("is not listed in manifest.json (added after saving?).", archive=self.archive, member=name)
        if entry is None:
            return
        info = self._infos[name]
        if entry.get("size") != info.file_size or entry.get("crc32") != f"{info.CRC:08x}":
            raise IntegrityError(
                f"differs from manifest.json: size {info.file_size} / crc32 {info.CRC:08x}, "
                f"expected size {entry.get('size')} / crc32 {entry.get('crc32')}.",
                archive=self.archive,
                member=name,
            )

    def check_digest(self, name: str, data: bytes | None = None, *, sha256: str | None = None) -> None:
        """Check ``name``'s bytes (or a precomputed digest) against the manifest's SHA-256."""
        entry = self.expected(name)
        if entry is None or not entry.get("sha256"):
            return
        digest = sha256 if sha256 is not None else hashlib.sha256(data if data is not None else b"").hexdigest()
        if digest != entry["sha256"]:
            raise IntegrityError(
                f"SHA-256 {digest} differs from manifest.json's {entry['sha256']}.",
                archive=self.archive,
                member=name,
            )

    # -- reading ---------------------------------------------------------------------------
    def _data_offset(self, name: str) -> int:
        offset = self._offsets.get(name)
        if offset is not None:
            return offset
        info = self._infos[name]
        with self._lock:
            self._fp.seek(info.header_offset)
            head = self._fp.read(_LOCAL.size)
            ok = len(head) == _LOCAL.size and head[:4] == b"PK\x03\x04"
            fields = _LOCAL.unpack(head) if ok else None
            local_name = self._fp.read(fields[9]) if fields is not None else b""
        if fields is None:
            raise ArchiveFormatError("local header is missing or damaged.", archive=self.archive, member=name)
        # The local header must name the same member: a directory entry renamed or pointed
        # at another member's data would otherwise load under the wrong name.
        encoding = "utf-8" if info.flag_bits & _FLAG_UTF8 else "cp437"
        if local_name != info.orig_filename.encode(encoding, "replace"):
            raise ArchiveFormatError(
                f"local header names {local_name[:80]!r}, the central directory "
                f"{info.orig_filename.encode(encoding, 'replace')[:80]!r} (corrupted or forged).",
                archive=self.archive,
                member=name,
            )
        offset = info.header_offset + _LOCAL.size + fields[9] + fields[10]
        if offset + info.compress_size > self._end:
            raise ArchiveFormatError("data extends past the central directory (truncated or forged).", archive=self.archive, member=name)
        self._offsets[name] = offset
        return offset

    def read(self, name: str, *, limit: int | None = None, verify: bool = True) -> bytes:
        """Read a whole (small) member with its CRC checked and limits enforced.

        With ``verify`` the bytes are also checked against the manifest's SHA-256.
        """
        info = self.info(name)
        if limit is not None and info.file_size > limit:
            raise ArchiveLimitError(
                f"is {info.file_size} bytes; the limit for this member is {limit}.",
                archive=self.archive,
                member=name,
                hint="Raise it with `limits=zipsave.Limits(...)` if you trust the archive.",
            )
        self._check_ratio(info)
        try:
            with self._lock, self._zip.open(info) as f:
                data = f.read(info.file_size + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as err:
            raise ArchiveFormatError(f"cannot be read ({err}).", archive=self.archive, member=name) from err
        if len(data) != info.file_size:
            raise ArchiveFormatError(
                f"holds {len(data)} bytes but declares {info.file_size}.", archive=self.archive, member=name
            )
        if verify:
            self.check_recorded(name)
            self.check_digest(name, data)
        return data

    def _check_ratio(self, info: zipfile.ZipInfo) -> None:
        if info.compress_type == zipfile.ZIP_STORED or info.file_size < (1 << 20):
            return
        ratio = info.file_size / max(1, info.compress_size)
        if ratio > self.limits.max_compression_ratio:
            raise ArchiveLimitError(
                f"expands {ratio:.0f}x when decompressed; the limit is {self.limits.max_compression_ratio:.0f}x "
                "(zip bomb?).",
                archive=self.archive,
                member=info.filename,
            )

    def iter_chunks(self, name: str, chunk: int = _READ_CHUNK) -> Iterator[bytes]:
        """The bytes of one member, in pieces of at most ``chunk`` bytes, without holding it
        whole: stored members are read in place, deflated ones inflated as they go (ratio
        limit first; zipfile checks their CRC at the end). Yields exactly the declared size or
        raises :class:`ArchiveFormatError`."""
        info = self.info(name)
        if info.compress_type == zipfile.ZIP_STORED:
            view = MemberView(self._fp, self._data_offset(name), info.file_size, self._lock)
            done = 0
            while done < info.file_size:
                buf = bytearray(min(chunk, info.file_size - done))
                n = view.read_at(done, buf)
                if n != len(buf):
                    raise ArchiveFormatError("ends early (truncated).", archive=self.archive, member=name)
                done += n
                yield bytes(buf)
            return
        self._check_ratio(info)
        done = 0
        try:
            with self._lock:
                src = self._zip.open(info)
            with src:
                while True:
                    with self._lock:
                        piece = src.read(chunk)
                    if not piece:
                        break
                    done += len(piece)
                    yield piece
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as err:
            raise ArchiveFormatError(f"cannot be inflated ({err}).", archive=self.archive, member=name) from err
        if done != info.file_size:
            raise ArchiveFormatError(
                f"inflates to {done} bytes but declares {info.file_size}.", archive=self.archive, member=name
            )

    def open_view(self, name: str) -> MemberView:
        """A seekable view of a member. Stored members are read in place; a deflated one
        (an archive re-packed by another tool) is first inflated to a temporary file."""
        info = self.info(name)
        if info.compress_type == zipfile.ZIP_STORED:
            return MemberView(self._fp, self._data_offset(name), info.file_size, self._lock)
        self._check_ratio(info)
        spool = tempfile.TemporaryFile()  # noqa: SIM115 - the view owns and closes it
        try:
            with self._lock, self._zip.open(info) as src:
                shutil.copyfileobj(src, spool, _READ_CHUNK)
            inflated = spool.tell()
            spool.flush()  # the view reads the descriptor directly (os.preadv)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as err:
            spool.close()
            raise ArchiveFormatError(f"cannot be inflated ({err}).", archive=self.archive, member=name) from err
        if inflated != info.file_size:
            spool.close()
            raise ArchiveFormatError(
                f"inflates to {inflated} bytes but declares {info.file_size}.", archive=self.archive, member=name
            )
        return MemberView(spool, 0, info.file_size, threading.Lock(), owns=True)

    def close(self) -> None:
        self._zip.close()


def manifest_digest(raw_manifest: bytes) -> str:
    """The SHA-256 of ``manifest.json``'s bytes: one identifier for the whole saved state."""
    return hashlib.sha256(raw_manifest).hexdigest()
