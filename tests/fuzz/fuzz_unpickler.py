"""atheris target: the restricted unpickler on arbitrary bytes. Anything but a value or a
``ZipsaveError`` (an exception of another type, a crash, a hang, memory past the run's limit)
is a finding. Run through ``tests/fuzz/run.py``."""

from __future__ import annotations

import sys

import atheris
import numpy  # noqa: F401 - imported before instrumentation: only zipsave is instrumented
import torch  # noqa: F401

with atheris.instrument_imports(include=["zipsave"]):
    from zipsave._trust import TrustPolicy, restricted_loads
    from zipsave.exceptions import ZipsaveError

POLICY = TrustPolicy()


def test_one_input(data: bytes) -> None:
    try:
        restricted_loads(data, POLICY)
    except ZipsaveError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
