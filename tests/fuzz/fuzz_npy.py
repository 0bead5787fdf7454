"""atheris target: the ``.npy`` member reader (``zipsave._tensors.read_npy``) on arbitrary
bytes as the member, its CRC-32 matching. The member either reads into an array that holds
exactly the member's data bytes (the bytes after its header, in memory order), or raises a
``ZipsaveError``; anything else is a finding. Each input is read twice: from memory, and with
``mmap=True`` from a file (a private map of the file where the data is aligned). Run through ``tests/fuzz/run.py``."""

from __future__ import annotations

import io
import os
import sys
import tempfile
import threading
import zlib

import atheris
import numpy as np

with atheris.instrument_imports(include=["zipsave"]):
    from zipsave._archive import MemberView
    from zipsave._tensors import read_npy
    from zipsave.exceptions import ZipsaveError

from checks import use_array

FILE = tempfile.TemporaryFile()


def test_one_input(data: bytes) -> None:
    check(data, MemberView(io.BytesIO(data), 0, len(data), threading.Lock()), mmap=False)
    FILE.truncate(0)
    os.pwrite(FILE.fileno(), data, 0)
    check(data, MemberView(FILE, 0, len(data), threading.Lock()), mmap=True)


def check(data: bytes, view: MemberView, *, mmap: bool) -> None:
    try:
        arr = read_npy(view, member="arrays/0.npy", expected_crc=zlib.crc32(data), mmap=mmap)
    except ZipsaveError:
        return
    use_array(arr, len(data))
    if not isinstance(arr, np.ndarray) or arr.dtype.hasobject:
        raise AssertionError(f"read_npy returned {type(arr).__name__} {getattr(arr, 'dtype', '')}")
    payload = data[len(data) - arr.nbytes :] if arr.nbytes else b""
    if arr.tobytes(order="A") != payload:
        raise AssertionError("the array's bytes are not the member's data bytes")


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
