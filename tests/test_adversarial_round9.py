"""Round nine of the adversarial suite: a ``.pth`` state dict whose ``_metadata`` shares its
lists (a walk of it that never ends), and SB3 values the first ``learn`` cannot use (sizes below
what SB3 computes with, non-finite rates and coefficients, a ``_last_obs`` of another shape than
the environment passed with ``force_reset=False``)."""

from __future__ import annotations

import base64
import collections
import io
import json
import pickle
import re
import zipfile

import numpy as np
import pytest

import zipsave

torch = pytest.importorskip("torch")


# -- a state dict's _metadata is walked like the rest of its tree ------------------------------


def _shared_metadata_archive(path, levels: int) -> str:
    """An archive whose ``policy.pth`` is torch.save's state dict with a dtype as a value (so a
    load turns the reader's stand-ins into torch's) and a ``_metadata`` of ``levels`` lists,
    each holding the one below twice: a few hundred bytes of pickle, 2**levels paths."""
    state = collections.OrderedDict(w=torch.ones(2), kind=torch.float32)
    node: list = [1]
    for _ in range(levels):
        node = [node, node]
    state._metadata = {"": {"version": 1}, "x": node}
    pth = io.BytesIO()
    torch.save(state, pth)
    saved = io.BytesIO()
    zipsave.save_archive(saved, data={"lr": 0.5}, params={"policy": {"w": torch.ones(2)}})
    with zipfile.ZipFile(io.BytesIO(saved.getvalue())) as src, zipfile.ZipFile(path, "w") as out:
        for name in src.namelist():
            if name != "manifest.json":
                out.writestr(name, pth.getvalue() if name == "policy.pth" else src.read(name))
    return str(path)


def test_a_state_dicts_shared_metadata_is_refused(tmp_path, capsys):
    # 18 levels: the old tree loaded it in about a second, walking 2**18 paths to turn the
    # stand-ins into torch's objects; 40 levels (the same bytes, 22 more lists) never finished
    path = _shared_metadata_archive(tmp_path / "meta.zip", 18)
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("shares containers so that walking")) as caught:
        zipsave.load_archive(path)
    assert caught.value.member == "policy.pth"
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("shares containers")):
        zipsave.read(path, "policy/w")


def test_a_state_dicts_own_metadata_still_loads(tmp_path):
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    zipsave.save_archive(tmp_path / "m.zip", data={"lr": 0.5}, params={"policy": module.state_dict()})
    _, params, _ = zipsave.load_archive(tmp_path / "m.zip")
    assert params["policy"]._metadata == module.state_dict()._metadata
    module.load_state_dict(params["policy"])
