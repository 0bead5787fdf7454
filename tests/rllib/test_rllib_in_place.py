"""A restore into an algorithm whose learner is in the driver: the saved weights and optimizer
moments are read straight into the live tensors (no fresh copy for RLlib to copy again), with
the same values and checks as a fresh read. A broken member leaves the live learner as it was:
``test_rllib_in_place_broken.py``."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import rllib_helpers
import torch
from conftest import FILTER_WARNINGS

import zipsave

pytestmark = [pytest.mark.filterwarnings(w) for w in FILTER_WARNINGS]
OPTIMIZER = "default_policy_default_optimizer"


def _config(seed):
    # Two hidden layers of 256: the moments of the 256x256 weights are `arrays/*.npy` members.
    return (
        rllib_helpers.ppo_config(filtered=False, seed=seed)
        .env_runners(num_env_runners=0)
        .rl_module(model_config={"fcnet_hiddens": [256, 256]})
    )


@pytest.fixture(scope="module")
def saved(ray_session, tmp_path_factory):
    algo = _config(0).build_algo()
    try:
        algo.train()
        path = tmp_path_factory.mktemp("in_place") / "ppo.zip"
        zipsave.save(algo, path)
        yield path, algo.learner_group._learner.get_state(), rllib_helpers.logits(algo)
    finally:
        algo.stop()


@pytest.fixture
def other(ray_session):
    algo = _config(1).build_algo()
    algo.train()
    yield algo
    algo.stop()


def _moments(algo):
    optimizer = algo.learner_group._learner._named_optimizers[OPTIMIZER]
    return optimizer, [t for state in optimizer.state.values() for t in state.values() if t.dim() == 2]


def _assert_optimizer_state(algo, expected):
    got = algo.learner_group._learner.get_state()["optimizer"][OPTIMIZER]["state"]
    want = expected["optimizer"][OPTIMIZER]["state"]
    assert got["param_groups"] == want["param_groups"]
    assert sorted(got["state"]) == sorted(want["state"])
    for index, state in want["state"].items():
        for key, value in state.items():
            np.testing.assert_array_equal(got["state"][index][key], value)


def test_restore_reads_weights_and_moments_into_the_live_learner(saved, other):
    path, expected, logits = saved
    assert any(n.endswith(".npy") for n in zipfile.ZipFile(path).namelist())
    params = list(other.get_module().parameters())
    optimizer, moments = _moments(other)
    big = {id(t) for t in moments if t.numel() >= 256 * 256}
    assert big
    zipsave.restore(other, path)
    assert list(other.get_module().parameters()) == params  # the same tensors, now the saved values
    _, after = _moments(other)
    assert big <= {id(t) for t in after}  # the large moments were read into, not replaced
    _assert_optimizer_state(other, expected)
    np.testing.assert_array_equal(rllib_helpers.logits(other), logits)
    np.testing.assert_array_equal(rllib_helpers.logits(other.env_runner.module), logits)  # the EnvRunner too
    other.train()


def test_mmap_restore_maps_the_moments_instead(saved, other):
    path, expected, logits = saved
    _, moments = _moments(other)
    zipsave.restore(other, path, mmap=True)
    _, after = _moments(other)
    assert not {id(t) for t in moments} & {id(t) for t in after}
    _assert_optimizer_state(other, expected)
    np.testing.assert_array_equal(rllib_helpers.logits(other), logits)
    assert all(isinstance(t, torch.Tensor) for t in after)
