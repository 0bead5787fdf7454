"""Tests for zipsave._archive: the deterministic aligned writer, the validating reader and its
limits, member views, and the manifest checks."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import zipfile
import zlib

import pytest
import torch

import zipsave
from zipsave import _format
from zipsave._archive import (
    ArchiveReader,
    ArchiveWriter,
    Limits,
    MemberView,
    atomic_output,
    open_input,
)
from zipsave.exceptions import (
    ArchiveFormatError,
    ArchiveLimitError,
    IntegrityError,
    ZipsaveError,
)

LOCAL = struct.Struct("<IHHHHHIIIHH")


class Pipe(io.RawIOBase):
    """A write-only, non-seekable output (a pipe, an upload)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        raise OSError("not seekable")

    def write(self, b) -> int:
        self.buf += bytes(b)
        return len(b)


def write_archive(fp, members, *, manifest=True, chunk=7, sha256=None):
    """members: {name: bytes}; names ending in .pth are streamed, the rest written whole."""
    writer = ArchiveWriter(fp, sha256=sha256)
    for name, data in members.items():
        if name.endswith(".pth"):
            with writer.open_member(name) as stream:
                for i in range(0, len(data), chunk):
                    stream.write(data[i : i + chunk])
        else:
            writer.write_bytes(name, data)
    if manifest:
        writer.write_manifest()
    writer.close()
    return writer


MEMBERS = {
    "data": b'{\n  "a": 1\n}\n',
    "policy.pth": os.urandom(1000),
    "empty.pth": b"",
    "arrays/0.npy": b"\x93NUMPY" + bytes(200),
    "système.txt": b"non-ASCII name",
}


def archive_bytes(members=MEMBERS, **kw) -> bytes:
    buf = io.BytesIO()
    write_archive(buf, members, **kw)
    return buf.getvalue()


def local_headers(raw: bytes):
    """(name, flags, crc, csize, usize, extra, data_offset) of every local header."""
    out = []
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        for info in zf.infolist():
            fields = LOCAL.unpack_from(raw, info.header_offset)
            name_len, extra_len = fields[9], fields[10]
            start = info.header_offset + LOCAL.size
            extra = raw[start + name_len : start + name_len + extra_len]
            out.append((info.filename, fields[2], fields[6], fields[7], fields[8], extra, start + name_len + extra_len))
    return out


def reader(raw: bytes, **kw) -> ArchiveReader:
    return ArchiveReader(io.BytesIO(raw), archive="test.zip", **kw)


# -- writer ----------------------------------------------------------------------------------
@pytest.mark.parametrize("output", ["seekable", "pipe"])
def test_written_archive_is_a_clean_zip(output):
    if output == "pipe":
        pipe = Pipe()
        write_archive(pipe, MEMBERS)
        raw = bytes(pipe.buf)
    else:
        raw = archive_bytes()
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        assert zf.testzip() is None
        assert zf.namelist() == [*MEMBERS, "manifest.json"]
        for name, data in MEMBERS.items():
            assert zf.read(name) == data
            info = zf.getinfo(name)
            assert info.compress_type == zipfile.ZIP_STORED
            assert info.date_time == _format.DATE_TIME


@pytest.mark.skipif(shutil.which("unzip") is None, reason="needs the unzip tool")
@pytest.mark.parametrize("output", ["seekable", "pipe"])
def test_unzip_tool_accepts_the_archive(tmp_path, output):
    if output == "pipe":
        pipe = Pipe()
        write_archive(pipe, MEMBERS)
        raw = bytes(pipe.buf)
    else:
        raw = archive_bytes()
    (tmp_path / "a.zip").write_bytes(raw)
    result = subprocess.run(["unzip", "-t", str(tmp_path / "a.zip")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No errors detected" in result.stdout


@pytest.mark.parametrize("output", ["seekable", "pipe", "offset-file"])
def test_member_data_is_aligned_to_64_bytes(tmp_path, output):
    if output == "pipe":
        pipe = Pipe()
        write_archive(pipe, MEMBERS)
        raw, base = bytes(pipe.buf), 0
    elif output == "offset-file":
        # Alignment is of the outer file, even when the archive starts mid-file.
        with open(tmp_path / "f", "wb+") as f:
            f.write(b"x" * 13)
            write_archive(f, MEMBERS)
        raw, base = (tmp_path / "f").read_bytes()[13:], 13
    else:
        raw, base = archive_bytes(), 0
    for name, *_rest, data_offset in local_headers(raw):
        assert (base + data_offset) % _format.ALIGNMENT == 0, name


def test_streamed_members_have_zip64_local_headers():
    for name, flags, crc, csize, usize, extra, _ in local_headers(archive_bytes()):
        if name.endswith(".pth"):
            assert (csize, usize) == (0xFFFFFFFF, 0xFFFFFFFF)
            head_id, head_len, size, csize64 = struct.unpack_from("<HHQQ", extra)
            assert (head_id, head_len) == (0x0001, 16)
            assert size == csize64 == len(MEMBERS[name])
            assert crc == zlib.crc32(MEMBERS[name])  # patched in after streaming
            assert not flags & 0x08
        else:
            assert usize == len(MEMBERS.get(name, b"")) or name == "manifest.json"


def test_non_seekable_output_uses_data_descriptors():
    pipe = Pipe()
    write_archive(pipe, MEMBERS)
    raw = bytes(pipe.buf)
    for name, flags, crc, _csize, _usize, _extra, data_offset in local_headers(raw):
        if name.endswith(".pth"):
            assert flags & 0x08 and crc == 0
            size = len(MEMBERS[name])
            sig, d_crc, d_csize, d_usize = struct.unpack_from("<IIQQ", raw, data_offset + size)
            assert (sig, d_crc, d_csize, d_usize) == (0x08074B50, zlib.crc32(MEMBERS[name]), size, size)
        else:
            assert not flags & 0x08


def test_non_ascii_names_are_flagged_utf8():
    flags = {name: f for name, f, *_ in local_headers(archive_bytes())}
    assert flags["système.txt"] & 0x800
    assert not flags["data"] & 0x800


@pytest.mark.parametrize("sha256", [None, True, False])
def test_manifest_records_every_member(sha256):
    raw = archive_bytes(sha256=sha256)
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        manifest = json.loads(zf.read("manifest.json"))
    assert manifest["format"] == "zipsave" and manifest["format_version"] == _format.FORMAT_VERSION
    assert list(manifest["members"]) == list(MEMBERS)
    for name, data in MEMBERS.items():
        # By default streamed members (tensors) carry size and CRC-32 only: hashing them
        # would triple the time of a large save.
        hashed = sha256 is True or (sha256 is None and not name.endswith(".pth"))
        assert manifest["members"][name] == {
            "size": len(data),
            "crc32": f"{zlib.crc32(data):08x}",
            "sha256": hashlib.sha256(data).hexdigest() if hashed else None,
        }


def test_same_members_same_bytes():
    assert archive_bytes() == archive_bytes()
    pipe_a, pipe_b = Pipe(), Pipe()
    write_archive(pipe_a, MEMBERS, chunk=3)
    write_archive(pipe_b, MEMBERS, chunk=500)
    assert pipe_a.buf == pipe_b.buf


def test_large_streamed_writes_hash_correctly():
    big = os.urandom(3 << 20)  # past the size handed to the hashing thread
    raw = archive_bytes({"big.pth": big}, chunk=len(big), sha256=True)
    r = reader(raw)
    assert r.expected("big.pth")["sha256"] == hashlib.sha256(big).hexdigest()
    assert r.read("big.pth") == big


def test_writing_a_member_twice_is_refused():
    writer = ArchiveWriter(io.BytesIO())
    writer.write_bytes("data", b"{}")
    with pytest.raises(ArchiveFormatError, match=re.escape("member `data`: member written twice while saving.")):
        writer.write_bytes("data", b"{}")
    writer.abort()


# -- reader: what it accepts ---------------------------------------------------------------
def test_reader_reads_and_verifies():
    r = reader(archive_bytes())
    assert r.names() == [*MEMBERS, "manifest.json"]
    assert r.manifest is not None and r.manifest_error is None
    for name, data in MEMBERS.items():
        assert r.read(name) == data
        assert b"".join(r.iter_chunks(name, chunk=100)) == data
        view = r.open_view(name)
        assert view.read() == data and view.size == len(data)
        r.check_recorded(name)
        r.check_digest(name, data)


def test_member_view_reads_in_place():
    r = reader(archive_bytes())
    data = MEMBERS["policy.pth"]
    view = r.open_view("policy.pth")
    assert view.seekable() and view.start % _format.ALIGNMENT == 0
    assert view.seek(10) == 10 and view.read(5) == data[10:15] and view.tell() == 15
    assert view.seek(-3, io.SEEK_END) == len(data) - 3 and view.read() == data[-3:]
    assert view.read(10) == b""
    buf = bytearray(8)
    assert view.read_at(len(data) - 4, buf) == 4 and bytes(buf[:4]) == data[-4:]
    with pytest.raises(ValueError, match=re.escape("negative seek position")):
        view.seek(-1)


def test_deflated_members_are_read_too(tmp_path):
    # An archive re-packed by a zip tool: every member deflated.
    with zipfile.ZipFile(io.BytesIO(archive_bytes())) as src:
        items = [(i.filename, src.read(i)) for i in src.infolist()]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for name, data in items:
            dst.writestr(name, data)
    r = reader(out.getvalue())
    for name, data in MEMBERS.items():
        assert r.read(name) == data
        view = r.open_view(name)
        assert view.read() == data
        spool = view._fp
        view.close()
        assert spool.closed  # the inflated copy belongs to the view


def test_sb3_archive_without_manifest_is_accepted():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("data", b"{}")
        zf.writestr("policy.pth", b"x")
    r = reader(out.getvalue())
    assert r.manifest is None and r.manifest_error is None
    r.check_recorded("data")  # nothing to compare with: no error
    assert r.read("policy.pth") == b"x"


# -- reader: limits and errors -------------------------------------------------------------
def zip_with(entries, compression=zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize(
    ("limits", "raw", "message"),
    [
        (
            Limits(max_members=2),
            zip_with([("a", b""), ("b", b""), ("c", b"")]),
            "archive `test.zip`: holds 3 members; the limit is 2.",
        ),
        (
            Limits(max_member_bytes=10),
            zip_with([("data", b"x" * 11)]),
            "archive `test.zip`, member `data`: declares 11 bytes; the limit is 10.",
        ),
        (
            Limits(max_total_bytes=15),
            zip_with([("a", b"x" * 8), ("b", b"x" * 8)]),
            "archive `test.zip`: members total 16 bytes; the limit is 15.",
        ),
    ],
    ids=["members", "member-bytes", "total-bytes"],
)
def test_archive_limits(limits, raw, message):
    with pytest.raises(ArchiveLimitError, match=re.escape(message)):
        reader(raw, limits=limits)


def test_compression_ratio_limit():
    raw = zip_with([("data", b" " * (4 << 20))], zipfile.ZIP_DEFLATED)
    r = reader(raw)
    message = "archive `test.zip`, member `data`: expands"
    with pytest.raises(ArchiveLimitError, match=re.escape(message)) as err:
        r.read("data")
    assert re.search(r"expands \d+x when decompressed; the limit is 200x \(zip bomb\?\)\.", str(err.value))
    with pytest.raises(ArchiveLimitError, match=re.escape(message)):
        r.open_view("data")
    with pytest.raises(ArchiveLimitError, match=re.escape(message)):
        list(r.iter_chunks("data"))
    assert reader(raw, limits=Limits(max_compression_ratio=1e6)).read("data") == b" " * (4 << 20)


def test_per_read_limit_fails_before_reading():
    r = reader(zip_with([("data", b"x" * 100)]))
    with pytest.raises(
        ArchiveLimitError,
        match=re.escape(
            "archive `test.zip`, member `data`: is 100 bytes; the limit for this member is 99. "
            "Raise it with `limits=zipsave.Limits(...)` if you trust the archive."
        ),
    ):
        r.read("data", limit=99)


@pytest.mark.parametrize("name", ["../evil", "a/../../evil", "/etc/passwd", "\\evil", "C:/evil", "c:evil", "..\\evil"])
def test_unsafe_names_are_refused(name):
    with pytest.raises(
        ArchiveFormatError,
        match=re.escape(f"member `{name}`: unsafe member name (absolute, drive-qualified or containing `..`)."),
    ):
        reader(zip_with([("data", b"{}"), (zipfile.ZipInfo(name), b"x")]))


def test_duplicate_names_are_refused():
    with pytest.raises(
        ArchiveFormatError,
        match=re.escape("member `data`: appears twice in the archive; refusing to guess which copy is meant."),
    ):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zipfile's own "Duplicate name" warning
            reader(zip_with([("data", b"{}"), ("data", b"[]")]))


def test_overlapping_members_are_refused():
    raw = bytearray(zip_with([("aaaa", b"x" * 50), ("bbbb", b"y" * 50)]))
    # Point the second central directory entry at the first local header (a zip bomb's trick).
    cd = raw.index(b"PK\x01\x02", raw.index(b"PK\x01\x02") + 4)
    struct.pack_into("<I", raw, cd + 42, 0)
    with pytest.raises(ArchiveFormatError, match=re.escape("member `aaaa`: overlaps member `bbbb`")):
        reader(bytes(raw))


def test_encrypted_and_unknown_methods_are_refused():
    raw = bytearray(zip_with([("data", b"{}")]))
    cd = raw.index(b"PK\x01\x02")
    flagged = bytearray(raw)
    struct.pack_into("<H", flagged, cd + 8, 0x1)
    with pytest.raises(
        ArchiveFormatError, match=re.escape("member `data`: is encrypted; zipsave does not read encrypted members.")
    ):
        reader(bytes(flagged))
    method = bytearray(raw)
    struct.pack_into("<H", method, cd + 10, 14)
    with pytest.raises(
        ArchiveFormatError,
        match=re.escape("member `data`: uses compression method 14; expected stored (0) or deflated (8)."),
    ):
        reader(bytes(method))


def test_stored_member_with_two_sizes_is_refused():
    raw = bytearray(zip_with([("data", b"{}")]))
    cd = raw.index(b"PK\x01\x02")
    struct.pack_into("<I", raw, cd + 24, 1)  # uncompressed size
    with pytest.raises(
        ArchiveFormatError,
        match=re.escape("member `data`: is stored but declares 2 compressed and 1 uncompressed bytes."),
    ):
        reader(bytes(raw))


def test_member_past_the_central_directory_is_refused():
    raw = bytearray(zip_with([("data", b"{}")]))
    cd = raw.index(b"PK\x01\x02")
    struct.pack_into("<II", raw, cd + 20, 500, 500)  # both sizes
    with pytest.raises(
        ArchiveFormatError,
        match=re.escape("member `data`: extends past the start of the central directory (truncated or forged)."),
    ):
        reader(bytes(raw))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "archive `test.zip`: not a zip archive, or truncated (File is not a zip file)."),
        (b"hello" * 10, "archive `test.zip`: not a zip archive, or truncated (File is not a zip file)."),
        (archive_bytes()[:-30], "archive `test.zip`: not a zip archive, or truncated"),
        (archive_bytes()[: len(archive_bytes()) // 2], "archive `test.zip`: "),
        (
            archive_bytes() + b"trailing",
            "the archive is truncated (cut off before its end) or has data appended after it.",
        ),
    ],
    ids=["empty", "text", "no-end-record", "half", "trailing"],
)
def test_not_a_zip_or_truncated(raw, message):
    with pytest.raises(ArchiveFormatError, match=re.escape(message)):
        reader(raw)


def test_crc_mismatch_is_caught_when_reading():
    raw = bytearray(archive_bytes())
    start = raw.index(MEMBERS["data"])
    raw[start] ^= 0xFF
    r = reader(bytes(raw))
    with pytest.raises(
        ArchiveFormatError, match=re.escape("member `data`: cannot be read (Bad CRC-32 for file 'data').")
    ):
        r.read("data")


def test_manifest_mismatches_are_integrity_errors():
    raw = archive_bytes()
    r = reader(raw)
    r.manifest["data"]["size"] = 1
    with pytest.raises(IntegrityError, match=re.escape("member `data`: differs from manifest.json: size 13 / crc32")):
        r.check_recorded("data")
    r.manifest["data"]["sha256"] = "0" * 64
    with pytest.raises(
        IntegrityError,
        match=re.escape(
            f"member `data`: SHA-256 {hashlib.sha256(MEMBERS['data']).hexdigest()} differs from manifest.json's {'0' * 64}."
        ),
    ):
        r.check_digest("data", MEMBERS["data"])
    del r.manifest["policy.pth"]
    with pytest.raises(
        IntegrityError, match=re.escape("member `policy.pth`: is not listed in manifest.json (added after saving?).")
    ):
        r.check_recorded("policy.pth")


@pytest.mark.parametrize("manifest", [b"[]", b"{not json", b'{"members": 3}', b"[" * 10_000 + b"]" * 10_000])
def test_unreadable_manifest_is_reported_not_raised(manifest):
    r = reader(zip_with([("data", b"{}"), ("manifest.json", manifest)]))
    assert r.manifest is None
    assert r.manifest_error.startswith("manifest.json is unreadable (")


def test_missing_member_is_named():
    with pytest.raises(ArchiveFormatError, match=re.escape("archive `test.zip`, member `nope`: no such member.")):
        reader(archive_bytes()).read("nope")


def test_errors_are_zipsave_errors_and_value_errors():
    assert issubclass(ArchiveLimitError, ArchiveFormatError)
    assert issubclass(ArchiveFormatError, ZipsaveError) and issubclass(ArchiveFormatError, ValueError)
    assert issubclass(IntegrityError, ArchiveFormatError)


# -- paths and atomic output ---------------------------------------------------------------
def test_open_input_tries_the_zip_suffix(tmp_path):
    (tmp_path / "m.zip").write_bytes(b"x")
    with open_input(str(tmp_path / "m")) as f:
        assert f.read() == b"x"
    with pytest.raises(
        ZipsaveError, match=re.escape(f"archive `{tmp_path / 'nope'}`: no such file (also tried with a `.zip` suffix).")
    ):
        open_input(str(tmp_path / "nope"))
    with pytest.raises(
        ArchiveFormatError, match=re.escape(f"archive `{tmp_path}`: is a directory, not a zip archive.")
    ):
        open_input(str(tmp_path))


def test_an_empty_or_missing_path_is_named_before_anything_is_written(tmp_path, monkeypatch):
    # zipsave.save(model, "") wrote a hidden `.zip` into the working directory (and load("")
    # read it back); a path of None was "expected str, bytes or os.PathLike object" from inside.
    monkeypatch.chdir(tmp_path)
    model = torch.nn.Linear(2, 2)
    for call in (lambda: zipsave.save(model, ""), lambda: zipsave.load(""), lambda: zipsave.save(model, "file://")):
        with pytest.raises(ValueError, match=re.escape("path is empty: give a file name such as `model.zip`.")):
            call()
    with pytest.raises(TypeError, match=r"path must be a file path .*, got NoneType None\."):
        zipsave.save(model, None)
    assert list(tmp_path.iterdir()) == []
    zipsave.save(model, os.fsencode(tmp_path / "m.zip"))  # a bytes path, as os.fspath gives one
    assert torch.equal(zipsave.load(os.fsencode(tmp_path / "m.zip"))["weight"], model.weight)


def test_atomic_output_replaces_and_keeps_the_mode(tmp_path):
    target = tmp_path / "a.zip"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    with atomic_output(str(target)) as f:
        f.write(b"new")
        assert target.read_bytes() == b"old"  # nothing visible until the end
    assert target.read_bytes() == b"new"
    assert os.stat(target).st_mode & 0o777 == 0o640
    assert os.listdir(tmp_path) == ["a.zip"]


def test_atomic_output_cleans_up_on_error(tmp_path):
    target = tmp_path / "a.zip"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), atomic_output(str(target)) as f:
        f.write(b"partial")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.zip"]


def test_durable_output_starts_the_disk_on_each_piece_of_a_large_write(tmp_path, monkeypatch):
    # a replay buffer's array arrives as one multi-gigabyte write: it is passed on in pieces,
    # each followed by a write-out of just the bytes not yet started, so the disk works while
    # the rest is still being copied into the page cache
    from zipsave._archive import _files

    kicks: list[tuple[int, int]] = []
    monkeypatch.setattr(_files, "_PIECE", 1 << 20)
    monkeypatch.setattr(_files, "_KICK_EVERY", 1 << 20)
    monkeypatch.setattr(
        _files, "_sync_file_range", lambda: lambda fd, start, length, flags: kicks.append((start, length))
    )
    data = os.urandom(5 << 20) + b"tail"
    target = tmp_path / "a.bin"
    with atomic_output(str(target)) as f:
        f.write(b"head")
        assert f.write(memoryview(data)) == len(data)
        f.seek(0)
        f.write(b"HEAD")  # a header patched behind the written range: nothing kicked again
        f.seek(0, os.SEEK_END)
    assert target.read_bytes() == b"HEAD" + data
    assert len(kicks) == 5
    assert kicks[0][0] == 0 and all(a + n == b for (a, n), (b, _) in zip(kicks, kicks[1:]))  # back to back


def test_member_view_over_a_plain_file(tmp_path):
    (tmp_path / "f").write_bytes(bytes(range(100)))
    import threading

    with open(tmp_path / "f", "rb") as f:
        view = MemberView(f, 10, 20, threading.Lock())
        assert view.read() == bytes(range(10, 30))
        view.close()
        assert not f.closed  # the outer file is not the view's to close


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("zipsave 0.2.0\nformat 1\n", ("0.2.0", 1)),
        ("zipsave 0.2.0\nformat \u00b2\n", ("0.2.0", None)),  # a digit to `isdigit`, not to `int`
        ("format \u0663\n", (None, None)),  # Arabic-Indic 3: only ASCII digits name a format
        ("format one\nzipsave \n", (None, None)),
    ],
)
def test_version_member_reads_only_ascii_format_numbers(text, expected):
    from zipsave._archive import parse_version

    assert parse_version(text) == expected
