"""atheris target: the archive reader (``zipsave.load_archive``, then ``zipsave.inspect``) on
arbitrary bytes as a file object. Anything but a result or a ``ZipsaveError`` is a finding.
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
    from zipsave.exceptions import ZipsaveError

LIMITS = zipsave.Limits(max_member_bytes=16 << 20, max_total_bytes=64 << 20, max_json_bytes=4 << 20)


def test_one_input(data: bytes) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for read in (zipsave.load_archive, zipsave.inspect):
            try:
                read(io.BytesIO(data), limits=LIMITS)
            except ZipsaveError:
                pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
