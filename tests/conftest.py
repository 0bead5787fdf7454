"""Shared test configuration: deterministic torch, hypothesis kept out of the repo."""

import os
import tempfile

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "zipsave-hypothesis"))

import torch  # noqa: E402

torch.set_num_threads(1)
