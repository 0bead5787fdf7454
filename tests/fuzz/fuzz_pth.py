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
import sys
import threading
import types
import warnings
import zlib

import atheris
import numpy  # noqa: F401 - imported before instrumentation: only zipsave is instrumented
import torch

with atheris.instrument_imports(include=["zipsave"]):
    import zipsave
    from zipsave._archive import MemberView
    from zipsave._tensors import load_member
    from zipsave.exceptions import ZipsaveError

from checks import repaired, use_tree

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
