"""Shared test configuration: deterministic torch, hypothesis kept out of the repo."""

import os
import tempfile

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "zipsave-hypothesis"))

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
