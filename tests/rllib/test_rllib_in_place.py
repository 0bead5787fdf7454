"""A restore into an algorithm whose learner is in the driver: the saved weights and optimizer
moments are read straight into the live tensors (no fresh copy for RLlib to copy again), with
the same values and checks as a fresh read; a member found corrupt while it was read in place
resets the optimizer it was going into and says so."""

from __future__ import annotations

import re
import shutil
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


def _corrupt_first_array(path, out):
    """A copy of the archive with one byte of the first array member's data flipped, its zip
    directory (CRC-32 and all) left as saved: the damage shows only when the bytes are read."""
    shutil.copy(path, out)
    with zipfile.ZipFile(out) as z:
        info = min((i for i in z.infolist() if i.filename.endswith(".npy")), key=lambda i: i.filename)
    with open(out, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = np.frombuffer(f.read(4), dtype="<u2")
        f.seek(info.header_offset + 30 + int(name_len) + int(extra_len) + info.file_size - 1)
        last = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([last ^ 0xFF]))
    return info.filename


def test_a_member_corrupt_when_read_in_place_resets_the_optimizer_and_names_it(saved, other, tmp_path):
    path, _, _ = saved
    member = _corrupt_first_array(path, tmp_path / "broken.zip")
    with pytest.raises(
        zipsave.IntegrityError,
        match=re.escape(f"member `{member}`: CRC-32 ")
        + ".*"
        + re.escape(f"It was being read in place into the state of the learner's optimizer `{OPTIMIZER}`"),
    ) as caught:
        zipsave.restore(other, tmp_path / "broken.zip")
    assert "`exclude=['learner_group/learner/optimizer']`" in str(caught.value)
    optimizer, _ = _moments(other)
    assert len(optimizer.state) == 0  # neither the saved nor its own moments: reset
    other.train()  # and it trains on, its moments starting again
    # What the hint says: the rest restores, the optimizer keeps its own state.
    _, moments = _moments(other)
    own = [t.clone() for t in moments]
    zipsave.restore(other, tmp_path / "broken.zip", exclude=["learner_group/learner/optimizer"])
    _, after = _moments(other)
    assert all(torch.equal(a, b) for a, b in zip(after, own, strict=True))
    np.testing.assert_array_equal(rllib_helpers.logits(other), saved[2])


def test_skip_broken_tensors_restores_the_rest_with_the_optimizer_reset(saved, other, tmp_path):
    path, expected, logits = saved
    member = _corrupt_first_array(path, tmp_path / "broken.zip")
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape(member)):
        zipsave.restore(other, tmp_path / "broken.zip", skip_broken_tensors=True, report=report)
    assert [e.key for e in report.skipped] == [f"optimizer.{OPTIMIZER}"]
    np.testing.assert_array_equal(rllib_helpers.logits(other), logits)
    optimizer, _ = _moments(other)
    assert len(optimizer.state) == 0
    assert other.training_iteration == 1
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
