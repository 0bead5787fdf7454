"""atheris target: the archive reader (``zipsave.load_archive``, ``zipsave.inspect``, then
``verify``) on arbitrary bytes as a file object, all through the strict zip reader
(``zipsave/_archive/_structure.py``). Anything but a result whose every tensor and array can be
used (``checks.py``) or a ``ZipsaveError`` is a finding. Each input is also read re-written by
zipfile with its CRC-32s right and without ``manifest.json`` (an archive as SB3 writes it, whose
members the zip CRC-32s alone check), so mutated members reach their readers.
Run through ``tests/fuzz/run.py``."""

from __future__ import annotations

import io
import sys
import warnings

import atheris
import numpy  # noqa: F401 - imported before instrumentation: only zipsave is instrumented
import torch  # noqa: F401

with atheris.instrument_imports(include=["zipsave"]):
    import zipsave
    from zipsave._tools import verify
    from zipsave.exceptions import ZipsaveError

from checks import repaired, use_tree

LIMITS = zipsave.Limits(max_member_bytes=16 << 20, max_total_bytes=64 << 20, max_json_bytes=4 << 20)


def test_one_input(data: bytes) -> None:
    check(data)
    fixed = repaired(data, drop=("manifest.json",))
    if fixed is not None and fixed != data:
        check(fixed)


def check(data: bytes) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            loaded = zipsave.load_archive(io.BytesIO(data), limits=LIMITS)
        except ZipsaveError:
            loaded = None
        if loaded is not None:
            use_tree(list(loaded), len(data))
        try:
            zipsave.inspect(io.BytesIO(data), limits=LIMITS)
        except ZipsaveError:
            pass
        problems = verify(io.BytesIO(data), limits=LIMITS)
        if not isinstance(problems, list):
            raise AssertionError(f"verify returned {problems!r}")


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
