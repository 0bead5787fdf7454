"""Reading and validating a zip archive: names, sizes, limits, CRC-32 and the manifest's hashes."""

from __future__ import annotations

import hashlib
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
from ._structure import check_one_end, read_structure
from ._views import MemberView
from ._zipfmt import (
    READ_CHUNK,
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
            # Names without the UTF-8 flag must be ASCII (the strict reader below refuses any
            # other): decoded as such, not as cp437, whose codec a first load would import.
            self._zip = zipfile.ZipFile(fp, metadata_encoding="ascii")
        except (
            zipfile.BadZipFile,
            OSError,
            ValueError,
            EOFError,
            struct.error,
            OverflowError,
            NotImplementedError,
            IndexError,
        ) as err:
            # zipfile parses the central directory without validating it; a forged one
            # surfaces as any of these. A file system object may fail a seek before the
            # start of a file shorter than a zip with ValueError where a local file fails with
            # BadZipFile: the first bytes tell the cases a person meets apart.
            known = describe_non_zip(fp)
            if known is not None:
                raise ArchiveFormatError(known[0], archive=archive, hint=known[1]) from err
            check_one_end(fp, archive=archive)
            if isinstance(err, UnicodeDecodeError):  # a name neither ASCII nor flagged UTF-8:
                read_structure(fp, archive=archive, limits=limits)  # its refusal names the member
            if isinstance(err, zipfile.BadZipFile):
                raise ArchiveFormatError(
                    f"not a zip archive, or truncated ({err}).",
                    archive=archive,
                    hint="Was the file fully written and copied? zipsave archives are zip files.",
                ) from err
            raise ArchiveFormatError(
                f"unreadable zip structure ({type(err).__name__}: {err}).", archive=archive
            ) from err
        self.structure = read_structure(fp, archive=archive, limits=limits)
        self._end = self.structure.cd_start
        self._infos: dict[str, zipfile.ZipInfo] = {}
        self._offsets: dict[str, int] = {}
        self._agree(self._zip.infolist())
        self.manifest: dict[str, dict] | None = None
        self.manifest_error: str | None = None
        #: The folders the manifest lists as saved as app state (empty: none, or no such list).
        self.app_state: frozenset[str] = frozenset()
        #: The ``.pth`` members the manifest lists as state dicts given as values of an app state,
        #: each with its place among the app state's keys.
        self.state_dict_values: dict[str, int] = {}
        self._load_manifest()

    def _agree(self, infos: list[zipfile.ZipInfo]) -> None:
        """zipfile's reading of the directory must be zipsave's, member for member: the archive
        is read one way only (``docs/format.rst``, "Reading a zip")."""
        entries = self.structure.entries
        if len(infos) != len(entries):
            raise ArchiveFormatError(
                f"zip readers disagree on it: zipfile lists {len(infos)} members, zipsave's reader {len(entries)}.",
                archive=self.archive,
            )
        for info, entry in zip(infos, entries, strict=True):
            seen = (
                info.filename,
                info.flag_bits,
                info.compress_type,
                info.CRC,
                info.compress_size,
                info.file_size,
                info.header_offset,
            )
            wanted = (
                entry.name,
                entry.flags,
                entry.method,
                entry.crc,
                entry.compress_size,
                entry.file_size,
                entry.header_offset,
            )
            if seen != wanted:
                raise ArchiveFormatError(
                    f"zip readers disagree on it: zipfile reads {seen}, zipsave's reader {wanted}.",
                    archive=self.archive,
                    member=entry.name,
                )
            self._infos[entry.name] = info
            self._offsets[entry.name] = entry.data_offset

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
            manifest = _json.loads(raw, max_depth=self.limits.max_json_depth, limits=self.limits)
            members = manifest["members"]
            if not isinstance(members, dict):
                raise TypeError("`members` is not an object")
            self.manifest = members
            folders = manifest.get(_format.MANIFEST_APP_STATE)
            if isinstance(folders, list) and all(isinstance(f, str) for f in folders):
                self.app_state = frozenset(folders)  # else as if absent: handlers are asked, as before
            values = manifest.get(_format.MANIFEST_STATE_DICT_VALUES)
            if isinstance(values, dict) and all(type(v) is int and 0 <= v < 1 << 32 for v in values.values()):
                self.state_dict_values = values  # else as if absent: members are objects' state
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
            raise IntegrityError(
                "is not listed in manifest.json (added after saving?).", archive=self.archive, member=name
            )
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
        return self._offsets[name]

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
            if info.compress_type == zipfile.ZIP_STORED:
                data = MemberView(self._fp, self._data_offset(name), info.file_size, self._lock).read()
                if len(data) == info.file_size and zlib.crc32(data) != info.CRC:
                    raise _Corrupt(f"Bad CRC-32 for file {info.filename!r}")
            else:
                data = b"".join(self._inflate(info, READ_CHUNK))
        except (_Corrupt, zlib.error, OSError, ValueError) as err:
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
            for piece in self._inflate(info, chunk):
                done += len(piece)
                yield piece
        except (_Corrupt, zlib.error, OSError, ValueError) as err:
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
            for piece in self._inflate(info, READ_CHUNK):
                spool.write(piece)
            inflated = spool.tell()
            spool.flush()  # the view reads the descriptor directly (os.preadv)
        except (_Corrupt, zlib.error, OSError, ValueError) as err:
            spool.close()
            raise ArchiveFormatError(f"cannot be inflated ({err}).", archive=self.archive, member=name) from err
        if inflated != info.file_size:
            spool.close()
            raise ArchiveFormatError(
                f"inflates to {inflated} bytes but declares {info.file_size}.", archive=self.archive, member=name
            )
        return MemberView(spool, 0, info.file_size, threading.Lock(), owns=True)

    def _inflate(self, info: zipfile.ZipInfo, chunk: int) -> Iterator[bytes]:
        """Inflate a deflated member in pieces of at most ``chunk`` bytes. The deflate stream
        must end exactly where its compressed bytes do, inflate to no more than the declared
        size, and match the CRC-32: nothing is read past the member or left unread in it."""
        view = MemberView(self._fp, self._data_offset(info.filename), info.compress_size, self._lock)
        inflater = zlib.decompressobj(-15)
        crc = out = taken = 0
        pending = b""
        while not inflater.eof:
            if not pending:
                if taken >= info.compress_size:
                    raise _Corrupt("Compressed file ended before the end-of-stream marker was reached")
                buf = bytearray(min(READ_CHUNK, info.compress_size - taken))
                if view.read_at(taken, buf) != len(buf):
                    raise _Corrupt("compressed data ends early (truncated)")
                taken += len(buf)
                pending = bytes(buf)
            piece = inflater.decompress(pending, min(chunk, info.file_size - out + 1))
            pending = inflater.unconsumed_tail
            if piece:
                out += len(piece)
                if out > info.file_size:
                    raise _Corrupt(f"inflates past its declared {info.file_size} bytes")
                crc = zlib.crc32(piece, crc)
                yield piece
        if pending or inflater.unused_data or taken != info.compress_size:
            raise _Corrupt(
                f"its deflate stream ends before its {info.compress_size} compressed bytes do (bytes hidden after it)"
            )
        if out == info.file_size and crc != info.CRC:
            raise _Corrupt(f"Bad CRC-32 for file {info.filename!r}")

    def close(self) -> None:
        self._zip.close()


class _Corrupt(Exception):
    """A member's bytes do not match what the directory says (turned into ArchiveFormatError)."""


def manifest_digest(raw_manifest: bytes) -> str:
    """The SHA-256 of ``manifest.json``'s bytes: one identifier for the whole saved state."""
    return hashlib.sha256(raw_manifest).hexdigest()
