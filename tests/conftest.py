"""Shared test configuration: deterministic torch, hypothesis kept out of the repo."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "zipsave-hypothesis"))
# SB3's `learn()` makes a `SB3-<date>` folder in the temp dir for its logger unless SB3_LOGDIR
# names one: thousands per run of the suite. One folder for the run (its subprocesses too),
# removed at the end.
if "SB3_LOGDIR" not in os.environ:
    os.environ["SB3_LOGDIR"] = tempfile.mkdtemp(prefix="zipsave-test-sb3-logs-")
    atexit.register(shutil.rmtree, os.environ["SB3_LOGDIR"], ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture
def installed():
    """SB3's doors routed through zipsave (``zipsave.sb3.install()``) for one test."""
    import zipsave.sb3  # here, not at the top: most tests must not import SB3

    zipsave.sb3.install()
    try:
        yield
    finally:
        zipsave.sb3.uninstall()
