"""Saving an algorithm with a remote learner after its Ray cluster is gone. It starts and stops
its own Ray, so it runs before the tests that share the session's (the file names sort first)."""

from __future__ import annotations

import pytest
import rllib_helpers
from conftest import FILTER_WARNINGS

import zipsave

pytestmark = [pytest.mark.filterwarnings(w) for w in FILTER_WARNINGS] + [pytest.mark.slow]


def test_a_gone_cluster_is_an_encode_error_naming_the_learner_and_starts_no_new_one(tmp_path):
    import ray

    assert not ray.is_initialized(), "run before the tests that share the session's Ray"
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False, _node_ip_address="127.0.0.1"
    )
    try:
        algo = rllib_helpers.remote_config(num_learners=1).env_runners(num_env_runners=0).build_algo()
        path = tmp_path / "ppo.zip"
        zipsave.save(algo, path)
        before = path.read_bytes()
    finally:
        ray.shutdown()
    with pytest.raises(zipsave.EncodeError, match="component `learner_group/learner` .*Ray is not running") as err:
        zipsave.save(algo, path)
    assert err.value.member == "learner_group/learner"
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["ppo.zip"]
    assert not ray.is_initialized()  # Ray's auto-init did not start a cluster to ask a dead actor
    # Its actors went with the cluster: nothing is left for the LearnerGroup's __del__ to shut
    # down (which would otherwise auto-start a Ray to try).
    algo.learner_group._is_shut_down = True
