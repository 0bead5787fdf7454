"""Differential test of the zip reader: valid archives are mutated (header bytes flipped,
sizes, methods, offsets and names changed, bytes prepended, appended or inserted, end
records duplicated), and wherever zipsave's reader and CPython's ``zipfile`` disagree on the
member list or any member's bytes, zipsave must have refused with a ``ZipsaveError``.

``ZIPSAVE_ZIP_DIFF_RUNS`` sets how many mutations each base archive gets (a fuzz campaign
sets it high); the default keeps the test to a few seconds.
"""

from __future__ import annotations

import io
import os
import random
import struct
import zipfile

import pytest
import torch

from zipsave._archive import ArchiveReader, ArchiveWriter, Limits
from zipsave.exceptions import ZipsaveError

RUNS = int(os.environ.get("ZIPSAVE_ZIP_DIFF_RUNS", "400"))
LIMITS = Limits(max_member_bytes=1 << 24, max_total_bytes=1 << 26)


class _Pipe(io.RawIOBase):
    def __init__(self) -> None:
        self.buf = bytearray()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, b) -> int:
        self.buf += bytes(b)
        return len(b)


def _zipsave(pipe: bool) -> bytes:
    out = _Pipe() if pipe else io.BytesIO()
    writer = ArchiveWriter(out)
    writer.write_bytes("data", b'{"a": 1, "b": [1, 2, 3]}')
    with writer.open_member("policy.pth") as f:
        torch.save({"w": torch.arange(4.0)}, f)
    writer.write_bytes("arrays/0.npy", b"\x93NUMPY" + bytes(40))
    writer.write_manifest()
    writer.close()
    return bytes(out.buf) if pipe else out.getvalue()


def _zipfile(pipe: bool, compression: int) -> bytes:
    out = _Pipe() if pipe else io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compression) as zf:
        zf.writestr("data", b'{"learning_rate": 0.0003}' * 4)
        zf.writestr("empty", b"")
        with zf.open("policy.pth", "w", force_zip64=True) as f:
            f.write(b"weights" * 30)
        zf.writestr("system_info.txt", b"- OS: Linux")
        zf.comment = b"made by zipfile"
    return bytes(out.buf) if pipe else out.getvalue()


BASES = {
    "zipsave": _zipsave(False),
    "zipsave-pipe": _zipsave(True),
    "zipfile-deflated": _zipfile(False, zipfile.ZIP_DEFLATED),
    "zipfile-pipe-deflated": _zipfile(True, zipfile.ZIP_DEFLATED),
    "zipfile-stored": _zipfile(False, zipfile.ZIP_STORED),
}


def _records(raw: bytes) -> list[int]:
    """Offsets of every header-like record: where a mutation does the most."""
    return [i for i in range(len(raw) - 3) if raw[i : i + 2] == b"PK" and raw[i + 2] in (1, 3, 5, 6, 7)]


_FIELDS = [
    (4, "H"),
    (6, "H"),
    (8, "H"),
    (10, "H"),
    (14, "I"),
    (18, "I"),
    (22, "I"),
    (26, "H"),
    (28, "H"),
    (20, "I"),
    (24, "I"),
    (30, "H"),
    (42, "I"),
    (12, "I"),
    (16, "I"),
    (34, "H"),
    (36, "H"),
]
_VALUES = [0, 1, 2, 8, 12, 0x800, 0x808, 0xFFFF, 0xFFFFFFFF, 0x7FFFFFFF]


def mutate(raw: bytes, rng: random.Random) -> bytes:
    out = bytearray(raw)
    records = _records(raw)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        kind = rng.randrange(8)
        if kind == 0 and records:  # a field of a record set to an edge value or nudged
            at = rng.choice(records)
            offset, fmt = rng.choice(_FIELDS)
            width = struct.calcsize(fmt)
            if at + offset + width <= len(out):
                old = struct.unpack_from("<" + fmt, out, at + offset)[0]
                new = rng.choice(_VALUES + [old + rng.randint(-40, 40)]) & (0xFFFF if fmt == "H" else 0xFFFFFFFF)
                struct.pack_into("<" + fmt, out, at + offset, new)
        elif kind == 1 and records:  # a byte flipped near a record
            at = min(len(out) - 1, rng.choice(records) + rng.randrange(60))
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 2:  # a byte flipped anywhere
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        elif kind == 3:  # bytes prepended: another archive, or junk
            out[:0] = rng.choice([BASES["zipfile-stored"], os.urandom(rng.randint(1, 64)), b"PK\x03\x04"])
        elif kind == 4:  # bytes appended
            out += rng.choice([b"\x00" * rng.randint(1, 30), raw[raw.rindex(b"PK\x05\x06") :], os.urandom(10)])
        elif kind == 5:  # bytes inserted at a record
            at = rng.choice(records) if records else 0
            out[at:at] = rng.choice([os.urandom(rng.randint(1, 16)), bytes(12), raw[at : at + 30]])
        elif kind == 6 and b"PK\x05\x06" in out:  # a second end record in the comment, its length fixed up
            end = out.rindex(b"PK\x05\x06")
            fake = bytes(out[end : end + 22])
            comment = bytes(out[end + 22 :]) + (b"x" * rng.randrange(4)) + fake
            out[end + 22 :] = comment
            struct.pack_into("<H", out, end + 20, len(comment) & 0xFFFF)
        else:  # a name byte changed (in one of the two headers)
            name = rng.choice([b"data", b"policy.pth", b"empty", b"system_info.txt", b"arrays/0.npy"])
            hits = [i for i in range(len(out)) if out.startswith(name, i)]
            if hits:
                at = rng.choice(hits) + rng.randrange(len(name))
                out[at] = rng.choice(b"Dx/\\.\x00")
    return bytes(out)


def _zipsave_view(raw: bytes) -> dict[str, bytes] | None:
    try:
        reader = ArchiveReader(io.BytesIO(raw), archive="mutated.zip", limits=LIMITS)
        return {name: reader.read(name, verify=False) for name in reader.names()}
    except ZipsaveError:
        return None


def _zipfile_view(raw: bytes) -> dict[str, bytes] | Exception:
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            return {info.filename: zf.read(info) for info in zf.infolist()}
    except Exception as err:  # noqa: BLE001 - any failure of zipfile's is a disagreement
        return err


@pytest.mark.parametrize("base", sorted(BASES))
def test_zipsave_refuses_wherever_zipfile_reads_otherwise(base):
    rng = random.Random(f"zip-diff-{base}")
    raw = BASES[base]
    assert _zipsave_view(raw) == _zipfile_view(raw)
    read = refused = 0
    for i in range(RUNS):
        mutated = mutate(raw, rng)
        ours = _zipsave_view(mutated)  # anything but a ZipsaveError fails the test here
        if ours is None:
            refused += 1
            continue
        read += 1
        theirs = _zipfile_view(mutated)
        assert ours == theirs, f"run {i}: zipsave read {sorted(ours)}, zipfile {theirs!r:.300}"
    # The mutator must exercise both sides: some mutations are harmless (a timestamp, a
    # byte of stored data), most are refused.
    assert refused > RUNS // 4 and read > 0, (read, refused)
