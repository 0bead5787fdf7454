"""The strict zip reader (zipsave/_archive/_structure.py): what real writers produce is read,
and every structure two zip readers could read differently is refused, by load and by verify."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zipfile

import pytest
import torch

import zipsave
from zipsave._archive import ArchiveReader, ArchiveWriter
from zipsave._tools._verify import verify
from zipsave.exceptions import ArchiveFormatError

HINT = "zipsave, zipfile, torch and SB3 never write this; the archive was damaged or built to fool a zip reader."


class Pipe(io.RawIOBase):
    def __init__(self) -> None:
        self.buf = bytearray()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, b) -> int:
        self.buf += bytes(b)
        return len(b)


def read_all(raw: bytes) -> dict[str, bytes]:
    reader = ArchiveReader(io.BytesIO(raw), archive="t.zip")
    return {name: reader.read(name, verify=False) for name in reader.names()}


def same_as_zipfile(raw: bytes) -> None:
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        expected = {info.filename: zf.read(info) for info in zf.infolist()}
    assert read_all(raw) == expected


def zipfile_archive(*, compression=zipfile.ZIP_DEFLATED, pipe=False, force_zip64=False, comment=b"") -> bytes:
    out = Pipe() if pipe else io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as zf:
        zf.writestr("data", b'{"a": 1}' * 50)
        zf.writestr("empty", b"")
        with zf.open("policy.pth", "w", force_zip64=force_zip64) as f:
            torch.save({"w": torch.arange(6.0)}, f)
        zf.writestr("sub/ü.txt", b"non-ASCII name, UTF-8 flag")
        zf.writestr(zipfile.ZipInfo("folder/"), b"")
        zf.comment = comment
    return bytes(out.buf) if pipe else out.getvalue()


def zipsave_archive(*, pipe=False) -> bytes:
    out = Pipe() if pipe else io.BytesIO()
    writer = ArchiveWriter(out)
    writer.write_bytes("data", b'{"a": 1}')
    with writer.open_member("policy.pth") as f:
        torch.save({"w": torch.arange(6.0)}, f)
    writer.write_bytes("système.txt", b"x")
    writer.write_manifest()
    writer.close()
    return bytes(out.buf) if pipe else out.getvalue()


# -- what real writers produce ----------------------------------------------------------------
@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
@pytest.mark.parametrize("pipe", [False, True], ids=["seekable", "descriptors"])
@pytest.mark.parametrize("force_zip64", [False, True])
def test_zipfile_archives_are_read(compression, pipe, force_zip64):
    same_as_zipfile(zipfile_archive(compression=compression, pipe=pipe, force_zip64=force_zip64, comment=b"a comment"))


def test_zipfile_zip64_offsets_sizes_and_counts_are_read(monkeypatch):
    # The limits where zipfile switches to zip64 records, lowered so that small files use them.
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 100)
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 3)
    raw = zipfile_archive(compression=zipfile.ZIP_STORED, force_zip64=True)
    monkeypatch.undo()
    assert b"PK\x06\x06" in raw and b"\xff\xff\xff\xff" in raw
    same_as_zipfile(raw)


@pytest.mark.parametrize("pipe", [False, True], ids=["seekable", "pipe"])
def test_zipsave_archives_are_read(pipe):
    same_as_zipfile(zipsave_archive(pipe=pipe))


def test_torch_save_zip_is_read():
    buf = io.BytesIO()
    torch.save({"a": torch.arange(10), "b": torch.ones(3, 3)}, buf)
    same_as_zipfile(buf.getvalue())


def test_many_members_use_a_zip64_count():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for i in range(0x10001):
            zf.writestr(f"m{i}", b"")
    reader = ArchiveReader(io.BytesIO(out.getvalue()), archive="t.zip")
    assert len(reader.names()) == 0x10001


@pytest.mark.skipif(shutil.which("zip") is None, reason="Info-ZIP's zip is not installed")
@pytest.mark.parametrize("options", [[], ["-9"], ["-fd"], ["-fz"]])
def test_info_zip_archives_are_read(tmp_path, options):
    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "in" / "data").write_bytes(b"hello\n" * 5000)
    (tmp_path / "in" / "sub" / "rand.bin").write_bytes(os.urandom(3000))
    subprocess.run(["zip", "-q", "-r", *options, str(tmp_path / "a.zip"), "."], cwd=tmp_path / "in", check=True)
    raw = (tmp_path / "a.zip").read_bytes()
    same_as_zipfile(raw)


# -- the three holes the hostile corpus found ----------------------------------------------
def test_an_archive_prepended_to_another_is_refused(tmp_path):
    path = tmp_path / "two.zip"
    zipsave.save({"a": 1}, tmp_path / "first.zip")
    zipsave.save({"a": 2}, tmp_path / "second.zip")
    path.write_bytes((tmp_path / "first.zip").read_bytes() + (tmp_path / "second.zip").read_bytes())
    with zipfile.ZipFile(path) as zf:  # zipfile reads the second archive, shifted
        assert b'"a": 2' in zf.read("data")
    message = f"archive `{path}`: central directory is declared at bytes "
    with pytest.raises(ArchiveFormatError, match=re.escape(message)):
        zipsave.load(path)
    assert verify(path)[0].startswith(message)


def test_local_header_method_must_match_the_directory():
    raw = bytearray(zipfile_archive(compression=zipfile.ZIP_STORED))
    struct.pack_into("<H", raw, 8, 8)  # the first local header says deflated; the directory says stored
    with pytest.raises(
        ArchiveFormatError,
        match=re.escape(
            "member `data`: local header says flags 0x0000 and method 8, the central directory flags 0x0000 and method 0."
        ),
    ):
        read_all(bytes(raw))


@pytest.mark.parametrize("after", [b"", b" and more comment"], ids=["closing", "inside"])
def test_a_second_end_record_in_the_comment_is_refused(tmp_path, after):
    inner = zipfile_archive()
    fake = inner[inner.rindex(b"PK\x05\x06") :]
    path = tmp_path / "comment.zip"
    path.write_bytes(zipfile_archive(comment=b"x" * 10 + fake + after))
    message = (
        f"archive `{path}`: holds a second end-of-central-directory record (in the archive comment); zip "
        "readers would disagree on which one is the archive's. " + HINT
    )
    with pytest.raises(ArchiveFormatError, match=re.escape(message)):
        with open(path, "rb") as fp:
            ArchiveReader(fp, archive=str(path))
    assert verify(path) == [message]


# -- every other disagreement -----------------------------------------------------------------
def _mutated(mutate) -> bytes:
    raw = bytearray(zipfile_archive(compression=zipfile.ZIP_STORED))
    mutate(raw)
    return bytes(raw)


def _insert_between(raw: bytearray) -> None:
    entries = _central_offsets(raw)
    second = raw.index(b"PK\x03\x04", 4)
    raw[second:second] = b"hidden"
    for at in entries:
        offset = struct.unpack_from("<I", raw, at + 6 + 42)[0]
        if offset >= second:
            struct.pack_into("<I", raw, at + 6 + 42, offset + 6)
    _shift_directory(raw, 6)


def _central_offsets(raw: bytearray) -> list[int]:
    """Where the outer archive's central directory entries start (a ``.pth`` member holds a
    zip of its own, so the signatures alone are not enough)."""
    end = raw.rindex(b"PK\x05\x06")
    count, _size, at = struct.unpack_from("<HII", raw, end + 10)
    found = []
    for _ in range(count):
        found.append(at)
        at += 46 + sum(struct.unpack_from("<HHH", raw, at + 28))
    return found


def _shift_directory(raw: bytearray, by: int) -> None:
    end = raw.rindex(b"PK\x05\x06")
    struct.pack_into("<I", raw, end + 16, struct.unpack_from("<I", raw, end + 16)[0] + by)


def _before_directory(raw: bytearray) -> None:
    cd = _central_offsets(raw)[0]
    raw[cd:cd] = b"hidden"
    _shift_directory(raw, 6)


def _local_crc(raw: bytearray) -> None:
    raw[14] ^= 0xFF


def _local_size(raw: bytearray) -> None:
    struct.pack_into("<I", raw, 18, struct.unpack_from("<I", raw, 18)[0] + 1)


def _local_name(raw: bytearray) -> None:
    raw[30] = ord("D")


def _local_flags(raw: bytearray) -> None:
    struct.pack_into("<H", raw, 6, 0x800)


def _central_flag(raw: bytearray) -> None:
    struct.pack_into("<H", raw, _central_offsets(raw)[0] + 8, 0x4000)


def _non_ascii_without_flag(raw: bytearray) -> None:
    for at in _central_offsets(raw):
        struct.pack_into("<H", raw, at + 8, 0)
    local = raw.index("sub/ü.txt".encode()) - 30
    struct.pack_into("<H", raw, local + 6, 0)


def _directory_count(raw: bytearray) -> None:
    end = raw.rindex(b"PK\x05\x06")
    struct.pack_into("<HH", raw, end + 8, 4, 4)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_insert_between, "member `data`: is followed by 6 bytes that belong to no member before `empty`"),
        (_before_directory, "holds 6 bytes between its last member and the central directory"),
        (_local_crc, "member `data`: local header says crc32 "),
        (_local_size, "member `data`: local header says crc32 "),
        (
            _local_name,
            "member `data`: local header names b'Data', the central directory b'data' (corrupted or forged).",
        ),
        (
            _local_flags,
            "member `data`: local header says flags 0x0800 and method 0, the central directory flags 0x0000",
        ),
        (_central_flag, "member `data`: sets general-purpose flag bits 0x4000, which zipsave does not read."),
        (_non_ascii_without_flag, "name is not ASCII and its UTF-8 flag (bit 11) is not set"),
        (_directory_count, "central directory holds "),
    ],
    ids=lambda v: v.__name__ if callable(v) else "",
)
def test_disagreements_are_refused(mutate, message):
    raw = _mutated(mutate)
    with pytest.raises(ArchiveFormatError, match=re.escape(message)):
        read_all(raw)


def test_a_data_descriptor_must_match_the_directory():
    raw = bytearray(zipfile_archive(pipe=True))
    descriptor = raw.index(b"PK\x07\x08")
    raw[descriptor + 4] ^= 0xFF  # its CRC-32
    with pytest.raises(
        ArchiveFormatError,
        match=re.escape("member `data`: is followed by 16 bytes where its data descriptor should be"),
    ):
        read_all(bytes(raw))


def test_a_deflate_stream_must_fill_its_compressed_size():
    raw = bytearray(zipfile_archive(compression=zipfile.ZIP_DEFLATED))
    # Hide bytes after the first member's deflate stream: declare them in both headers.
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as zf:
        info = zf.getinfo("data")
    end = info.header_offset + 30 + len(b"data") + info.compress_size
    entries = _central_offsets(raw)
    raw[end:end] = b"hidden"
    struct.pack_into("<I", raw, 18, info.compress_size + 6)
    for at in entries:
        offset = struct.unpack_from("<I", raw, at + 6 + 42)[0]
        if offset == 0:
            struct.pack_into("<I", raw, at + 6 + 20, info.compress_size + 6)
        else:
            struct.pack_into("<I", raw, at + 6 + 42, offset + 6)
    _shift_directory(raw, 6)
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as zf:
        assert zf.read("data") == b'{"a": 1}' * 50  # zipfile ignores what follows the stream
    reader = ArchiveReader(io.BytesIO(bytes(raw)), archive="t.zip")
    with pytest.raises(
        ArchiveFormatError, match=re.escape("member `data`: cannot be read (its deflate stream ends before its ")
    ):
        reader.read("data", verify=False)
    assert "its deflate stream ends before" in " ".join(verify(io.BytesIO(bytes(raw))))


def test_verify_reports_the_structure(tmp_path):
    raw = _mutated(_local_crc)
    problems = verify(io.BytesIO(raw))
    assert len(problems) == 1 and "local header says crc32" in problems[0]


@pytest.mark.parametrize("how", ["prepended", "comment"])
def test_the_verify_command_says_not_ok(tmp_path, how):
    zipsave.save({"a": 1}, tmp_path / "one.zip")
    raw = (tmp_path / "one.zip").read_bytes()
    path = tmp_path / "bad.zip"
    if how == "prepended":
        path.write_bytes(zipfile_archive() + raw)
    else:
        path.write_bytes(zipfile_archive(comment=raw[raw.rindex(b"PK\x05\x06") :]))
    result = subprocess.run(
        [sys.executable, "-m", "zipsave", "verify", "--json", str(path)], capture_output=True, text=True, check=False
    )
    report = json.loads(result.stdout)
    assert result.returncode != 0 and report["ok"] is False and len(report["problems"]) == 1
