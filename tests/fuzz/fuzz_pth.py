"""atheris target: the ``.pth`` member reader (``zipsave._tensors.load_member``, what
``load_archive`` calls for each ``.pth`` member) on arbitrary bytes as the member, its CRC-32
matching (so damage reaches the parser, not only the checksum), then on the same bytes with
the member's own zip re-written with its records' CRC-32s right (so a mutated pickle or
record reaches the unpickler and the tensor checks, not only the record's checksum). The member either loads into
values every one of which can be summed, copied and densified, with no storage larger than
the member, or raises a ``ZipsaveError``; anything else is a finding.
Run through ``tests/fuzz/run.py``."""

from __future__ import annotations

import io
import struct
import sys
import threading
import types
import warnings
import zipfile
import zlib

import atheris

import numpy  # noqa: F401 - imported before instrumentation: only zipsave is instrumented
import torch

with atheris.instrument_imports(include=["zipsave"]):
    import zipsave
    from zipsave._archive import MemberView
    from zipsave._tensors import load_member
    from zipsave.exceptions import ZipsaveError

from checks import use_tree

LIMITS = zipsave.Limits(max_member_bytes=16 << 20, max_total_bytes=64 << 20, max_json_bytes=4 << 20)
CPU = torch.device("cpu")


class OneMember:
    """The little of an ``ArchiveReader`` that ``load_member`` uses, over one member's bytes."""

    archive = "fuzz.zip"
    limits = LIMITS

    def __init__(self, data: bytes) -> None:
        self.data = data

    def check_recorded(self, member: str) -> None:
        pass

    def info(self, member: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(CRC=zlib.crc32(self.data), file_size=len(self.data))

    def expected(self, member: str) -> None:
        return None

    def open_view(self, member: str) -> MemberView:
        return MemberView(io.BytesIO(self.data), 0, len(self.data), threading.Lock())


def repaired(data: bytes) -> bytes | None:
    """``data``'s zip members (stored ones, as torch.save writes) re-written by zipfile with
    their CRC-32s right, or ``None`` where zipfile cannot list them."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()[:64]
    except Exception:
        return None
    out = io.BytesIO()
    try:
        with warnings.catch_warnings(), zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
            warnings.simplefilter("ignore")  # duplicate names stay duplicate: the reader must refuse them
            for info in infos:
                head = data[info.header_offset:info.header_offset + 30]
                if len(head) < 30 or info.compress_type != zipfile.ZIP_STORED or not info.filename:
                    return None
                start = info.header_offset + 30 + sum(struct.unpack("<HH", head[26:30]))
                dst.writestr(info.filename, data[start:start + info.compress_size])
    except Exception:  # what zipfile will not write is no input to the reader
        return None
    return out.getvalue()


def test_one_input(data: bytes) -> None:
    check(data)
    fixed = repaired(data)
    if fixed is not None and fixed != data:
        check(fixed)


def check(data: bytes) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree, _ = load_member(OneMember(data), "policy.pth", device=CPU)
        except ZipsaveError:
            return
    use_tree(tree, len(data))


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
