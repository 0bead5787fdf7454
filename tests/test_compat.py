"""Backward compatibility: archives written by format 1 (tests/data/format1/) load forever."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import torch
from models import Algo

import zipsave

DATA = pathlib.Path(__file__).parent / "data" / "format1"
EXPECTED = json.loads((DATA / "expected.json").read_text())


def test_format1_model_loads():
    algo = zipsave.load(DATA / "algo.zip")
    assert isinstance(algo, Algo) and algo.zipsave_report.ok
    obs = np.linspace(-1, 1, 40, dtype=np.float32).reshape(10, 4)
    assert algo.predict(obs).tolist() == EXPECTED["algo_predict"]
    assert algo.num_timesteps == EXPECTED["algo_num_timesteps"]
    assert float(algo.log_ent_coef.detach()) == EXPECTED["algo_log_ent_coef"]
    assert algo.notes["tags"] == ("format", 1)
    assert np.array_equal(algo.notes["big"], np.arange(20000, dtype=np.int32))


def test_format1_app_state_restores():
    net = torch.nn.Linear(3, 2)
    state = {"model": net, "step": 0}
    zipsave.restore(state, DATA / "app_state.zip")
    assert state["step"] == 7
    assert torch.equal(net.weight, torch.arange(6.0).reshape(2, 3)) and torch.all(net.bias == 0.5)


def test_format1_archives_verify():
    from zipsave._tools import verify

    for name in ("algo.zip", "app_state.zip"):
        assert verify(DATA / name) == []
