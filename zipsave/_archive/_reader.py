"""Reading and validating a zip archive: names, sizes, limits, CRC-32 and the manifest's hashes."""

from __future__ import annotations

import hashlib
import io
import itertools
import shutil
import struct
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Iterator
from typing import IO, Any

from .. import _format, _json
from ..exceptions import (
    ArchiveFormatError,
    ArchiveLimitError,
    IntegrityError,
    ZipsaveError,
)
from ._limits import DEFAULT_LIMITS, Limits
from ._views import MemberView
from ._zipfmt import (
    FLAG_UTF8,
    LOCAL,
    READ_CHUNK,
    check_name,
    describe_non_zip,
)

__all__ = ["ArchiveReader", "manifest_digest"]


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
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error, OverflowError, NotImplementedError, IndexError) as err:
            # zipfile parses the central directory without validating it; a forged one
            # surfaces as any of these. A file system object may fail a seek before the
            # start of a file shorter than a zip with ValueError where a local file fails with
            # BadZipFile: the first bytes tell the cases a person meets apart.
            known = describe_non_zip(fp)
            if known is not None:
                raise ArchiveFormatError(known[0], archive=archive, hint=known[1]) from err
            if isinstance(err, zipfile.BadZipFile):
                raise ArchiveFormatError(
                    f"not a zip archive, or truncated ({err}).",
                    archive=archive,
                    hint="Was the file fully written and copied? zipsave archives are zip files.",
                ) from err
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
            check_name(name, archive)
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
            if info.header_offset < 0 or info.header_offset + LOCAL.size + info.compress_size > self._end:
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
            # No byte count here: the end record found may be a nested `.pth` member's own,
            # whose place says nothing about the archive's.
            raise ArchiveFormatError(
                f"does not end with its end-of-central-directory record ({size} bytes): the archive is "
                "truncated (cut off before its end) or has data appended after it.",
                archive=archive,
                hint="Was the file fully written and copied?",
            )

    def _check_overlaps(self, archive: Any) -> None:
        """Members must not share bytes: overlapping entries are how a 40 KB zip expands to
        gigabytes (a "non-recursive" zip bomb), and zipsave never writes them."""
        ordered = sorted(self._infos.values(), key=lambda i: i.header_offset)
        for first, second in itertools.pairwise(ordered):
            if first.header_offset + LOCAL.size + first.compress_size > second.header_offset:
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
        if entry is None and name.endswith("/") and self._infos[name].file_size == 0:
            return  # a folder entry, which `zip -r` and zip explorers add when re-zipping
        if self.manifest is not None and entry is None and name not in (_format.MANIFEST, _format.SIGNATURE):
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
                expected=f"crc32 {entry.get('crc32')}",
                found=f"crc32 {info.CRC:08x}",
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
                expected=f"sha256 {entry['sha256']}",
                found=f"sha256 {digest}",
            )

    # -- reading ---------------------------------------------------------------------------
    def _data_offset(self, name: str) -> int:
        offset = self._offsets.get(name)
        if offset is not None:
            return offset
        info = self._infos[name]
        with self._lock:
            self._fp.seek(info.header_offset)
            head = self._fp.read(LOCAL.size)
            ok = len(head) == LOCAL.size and head[:4] == b"PK\x03\x04"
            fields = LOCAL.unpack(head) if ok else None
            local_name = self._fp.read(fields[9]) if fields is not None else b""
        if fields is None:
            raise ArchiveFormatError("local header is missing or damaged.", archive=self.archive, member=name)
        # The local header must name the same member: a directory entry renamed or pointed
        # at another member's data would otherwise load under the wrong name.
        encoding = "utf-8" if info.flag_bits & FLAG_UTF8 else "cp437"
        if local_name != info.orig_filename.encode(encoding, "replace"):
            raise ArchiveFormatError(
                f"local header names {local_name[:80]!r}, the central directory "
                f"{info.orig_filename.encode(encoding, 'replace')[:80]!r} (corrupted or forged).",
                archive=self.archive,
                member=name,
            )
        offset = info.header_offset + LOCAL.size + fields[9] + fields[10]
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

    def iter_chunks(self, name: str, chunk: int = READ_CHUNK) -> Iterator[bytes]:
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
                shutil.copyfileobj(src, spool, READ_CHUNK)
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
