"""RLlib with remote learner actors (``num_learners`` 1 and 2) and a remote EnvRunner: save,
restore into a new algorithm (every learner asked for its state), load whole, across learner
counts, one module into a multi-agent algorithm, and reading errors (a dead learner)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import rllib_helpers
from conftest import FILTER_WARNINGS

import zipsave

pytestmark = [pytest.mark.filterwarnings(w) for w in FILTER_WARNINGS] + [pytest.mark.slow]
MODULE = "learner_group/learner/rl_module/default_policy"


@pytest.fixture(scope="module")
def remote_run(ray_session, tmp_path_factory):
    """PPO with 2 remote learners trained once and saved: (algo, archive, every learner's state)."""
    algo = rllib_helpers.remote_config(num_learners=2).build_algo()
    algo.train()
    path = tmp_path_factory.mktemp("remote") / "ppo.zip"
    zipsave.save(algo, path)
    states = rllib_helpers.learner_states(algo)
    yield algo, path, states
    algo.stop()


@pytest.fixture(scope="module")
def fresh_remote(ray_session, remote_run):
    """A second PPO with 2 remote learners, another seed, never trained."""
    algo = rllib_helpers.remote_config(num_learners=2, seed=1).build_algo()
    yield algo
    algo.stop()


def test_the_learner_is_recorded_by_its_own_class_not_rays_actor_wrapper(remote_run):
    _, path, states = remote_run
    with zipfile.ZipFile(path) as z:
        init = json.loads(z.read("learner_group/learner/init.json"))
    assert init["class"] == "ray.rllib.algorithms.ppo.torch.ppo_torch_learner:PPOTorchLearner"
    # the two learners train in step (DDP): what learner 0 gave is what both hold
    rllib_helpers.assert_same(states[0], states[1])
    saved = zipsave.read(path, f"{MODULE}/module/pi.net.mlp.0.weight").numpy()
    np.testing.assert_array_equal(saved, states[0]["rl_module"]["default_policy"]["pi.net.mlp.0.weight"])
    assert states[0]["optimizer"], "the optimizer holds Adam's moments after a train()"


def test_restore_into_a_new_algorithm_sets_every_remote_learner_and_env_runner(remote_run, fresh_remote):
    _, path, saved = remote_run
    before = rllib_helpers.learner_states(fresh_remote)
    with pytest.raises(AssertionError):
        rllib_helpers.assert_same(saved[0]["rl_module"], before[0]["rl_module"])
    zipsave.restore(fresh_remote, path)
    after = rllib_helpers.learner_states(fresh_remote)
    assert len(after) == 2
    for state in after:  # weights and optimizer state (Adam's moments and step), on each learner
        rllib_helpers.assert_same(saved[0], state)
    expected = rllib_helpers.logits(zipsave.load(path, component=MODULE))
    np.testing.assert_array_equal(rllib_helpers.remote_logits(fresh_remote), expected)
    np.testing.assert_array_equal(rllib_helpers.logits(fresh_remote), expected)  # the local EnvRunner's
    fresh_remote.train()
    assert fresh_remote.training_iteration == 2


def test_load_whole_rebuilds_the_remote_learners(remote_run):
    _, path, saved = remote_run
    algo = zipsave.load(path)
    try:
        assert algo.learner_group.is_remote and len(algo.learner_group) == 2
        for state in rllib_helpers.learner_states(algo):
            rllib_helpers.assert_same(saved[0], state)
        np.testing.assert_array_equal(
            rllib_helpers.remote_logits(algo), rllib_helpers.logits(zipsave.load(path, component=MODULE))
        )
        algo.train()
    finally:
        algo.stop()


def test_the_module_of_a_remote_learner_archive_loads_with_no_ray_running(remote_run, tmp_path):
    _, path, saved = remote_run
    code = (
        "import sys, numpy as np, ray, zipsave, rllib_helpers\n"
        "def refuse(*a, **k): raise RuntimeError('ray.init called')\n"
        "ray.init = refuse\n"
        f"m = zipsave.load({str(path)!r}, component={MODULE!r})\n"
        "assert not ray.is_initialized()\n"
        "np.save(sys.argv[1], rllib_helpers.logits(m))\n"
    )
    out = tmp_path / "logits.npy"
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=300, cwd=str(tmp_path)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_array_equal(np.load(out), rllib_helpers.logits(zipsave.load(path, component=MODULE)))


def test_an_archive_of_a_local_learner_restores_into_two_remote_learners(ppo, ppo_zip, fresh_remote):
    zipsave.restore(fresh_remote, ppo_zip)
    expected = ppo.learner_group.get_weights()["default_policy"]  # the (local) learner's module
    for weights in rllib_helpers.module_weights(rllib_helpers.learner_states(fresh_remote)):
        rllib_helpers.assert_same(expected, weights)
    np.testing.assert_array_equal(rllib_helpers.remote_logits(fresh_remote), rllib_helpers.logits(ppo))


def test_an_archive_of_two_remote_learners_restores_into_a_local_learner(remote_run):
    _, path, saved = remote_run
    algo = rllib_helpers.remote_config(num_learners=0, seed=2).build_algo()
    try:
        zipsave.restore(algo, path)
        assert algo.learner_group.is_local
        rllib_helpers.assert_same(saved[0], rllib_helpers.learner_states(algo)[0])
        np.testing.assert_array_equal(rllib_helpers.remote_logits(algo), rllib_helpers.logits(algo))
        algo.train()
    finally:
        algo.stop()


def test_one_module_into_one_policy_of_a_multi_agent_algorithm_with_one_remote_learner(remote_run, tmp_path):
    _, path, saved = remote_run
    algo = rllib_helpers.remote_multi_agent_config().build_algo()
    try:
        p0 = rllib_helpers.module_weights(rllib_helpers.learner_states(algo), "p0")[0]
        zipsave.restore(algo, path, component=MODULE, into="learner_group/learner/rl_module/p1")
        (state,) = rllib_helpers.learner_states(algo)
        rllib_helpers.assert_same(saved[0]["rl_module"]["default_policy"], state["rl_module"]["p1"])
        rllib_helpers.assert_same(p0, state["rl_module"]["p0"])  # the other policy untouched
        # and with one remote learner, the algorithm's own round trip
        zipsave.save(algo, tmp_path / "multi.zip")
        algo.train()
        assert not np.array_equal(
            rllib_helpers.learner_states(algo)[0]["rl_module"]["p1"]["pi.net.mlp.0.weight"],
            state["rl_module"]["p1"]["pi.net.mlp.0.weight"],
        )
        zipsave.restore(algo, tmp_path / "multi.zip")
        restored = rllib_helpers.learner_states(algo)[0]
        for part in rllib_helpers.LEARNER_PARTS:  # (a saved weights_seq_no of 0 is never set back, as in RLlib)
            rllib_helpers.assert_same(state[part], restored[part], part)
    finally:
        algo.stop()


def test_a_dead_learner_is_an_encode_error_naming_the_component_and_the_old_archive_stays(remote_run, tmp_path):
    import ray

    algo, path, _ = remote_run
    target = tmp_path / "keep.zip"
    target.write_bytes(path.read_bytes())
    for worker in algo.learner_group._backend_executor.worker_group.workers:  # every learner actor dies
        ray.kill(worker.actor)
    with pytest.raises(zipsave.EncodeError, match="could not read the state of component `learner_group") as err:
        zipsave.save(algo, target)
    assert err.value.member is not None and err.value.member.startswith("learner_group")
    assert target.read_bytes() == path.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.zip"]
