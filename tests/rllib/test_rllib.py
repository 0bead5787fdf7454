"""An RLlib algorithm through zipsave on a real local Ray: save, load whole, load and restore one
component, RLlib's own directories both ways, safe loads, URLs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import rllib_helpers
from conftest import FILTER_WARNINGS

import zipsave
from zipsave.rllib import from_rllib, to_rllib

pytestmark = [pytest.mark.filterwarnings(w) for w in FILTER_WARNINGS]
TRUST = ["rllib_helpers.mean_std_filter"]
MODULE = "learner_group/learner/rl_module/default_policy"


def test_save_writes_the_component_tree_with_tensors_and_readable_config(ppo, ppo_zip):
    info = zipsave.inspect(ppo_zip)
    names = {m.name for m in info.members}
    for folder in (
        "",
        "learner_group/",
        "learner_group/learner/",
        f"{MODULE}/",
        "env_runner/",
        "env_runner/env_to_module_connector/MeanStdFilter/",
    ):
        assert f"{folder}init.json" in names and f"{folder}data" in names
    tensors = {t.name: t for t in info.tensors}
    weight = tensors[f"{MODULE}/module/pi.net.mlp.0.weight"]
    assert (weight.dtype, tuple(weight.shape)) == ("float32", (2, 8))
    with zipfile.ZipFile(ppo_zip) as z:
        init = json.loads(z.read("init.json"))
    assert init["class"] == "ray.rllib.algorithms.ppo.ppo:PPO" and init["handler"] == "rllib"
    config = init["args"]["args"][":zipsave:"]["items"][0]
    assert config["env"] == "CartPole-v1" and config["lr"] == ppo.config.lr
    assert config["_env_to_module_connector"][":zipsave:"] == {"kind": "ref", "path": "rllib_helpers:mean_std_filter"}
    saved = zipsave.read(ppo_zip, f"{MODULE}/module/pi.net.mlp.0.weight")
    assert np.array_equal(saved.numpy(), ppo.get_module().pi.net.mlp[0].weight.detach().numpy())


def test_remote_env_runner_filter_state_is_saved(ppo, ppo_zip):
    remote = rllib_helpers.remote_filter_state(ppo)[0]
    with zipfile.ZipFile(ppo_zip) as z:
        data = json.loads(z.read("env_runner/env_to_module_connector/MeanStdFilter/data"))
    assert rllib_helpers.filter_pushes(remote) > 0
    assert json.dumps(remote[None]["running_stats"][0]["num_pushes"]) in json.dumps(data["rllib_state"])


def test_load_whole_gives_same_outputs_filter_and_trains_on(ppo, ppo_zip):
    algo = zipsave.load(ppo_zip, trusted=TRUST)
    try:
        assert type(algo) is type(ppo) and algo.training_iteration == ppo.training_iteration
        np.testing.assert_array_equal(rllib_helpers.logits(algo), rllib_helpers.logits(ppo))
        restored = rllib_helpers.remote_filter_state(algo)[0]
        assert rllib_helpers.filter_pushes(restored) == rllib_helpers.filter_pushes(
            rllib_helpers.remote_filter_state(ppo)[0]
        )
        algo.train()
        assert algo.training_iteration == ppo.training_iteration + 1
    finally:
        algo.stop()


def test_default_load_refuses_an_untrusted_reference_naming_component_and_key(ppo_zip):
    with pytest.raises(
        zipsave.UnsafeGlobalError,
        match=re.escape(
            "member `init.json`, key `args[0]._env_to_module_connector`: refusing to import untrusted global "
            "`rllib_helpers.mean_std_filter`. To allow it, pass `trusted=['rllib_helpers.mean_std_filter']`"
        ),
    ):
        zipsave.load(ppo_zip)


def test_default_load_refuses_a_pickled_lambda(ray_session, tmp_path):
    config = rllib_helpers.ppo_config(filtered=False)
    config.env_runners(num_env_runners=0, env_to_module_connector=lambda env, spaces, device: [])
    algo = config.build_algo()
    try:
        zipsave.save(algo, tmp_path / "lambda.zip")
    finally:
        algo.stop()
    with pytest.raises(
        zipsave.UnsafeGlobalError, match=re.escape("key `args[0]._env_to_module_connector`: refusing to import")
    ):
        zipsave.load(tmp_path / "lambda.zip")


def test_load_one_module_without_ray(ppo, ppo_zip):
    code = (
        "import sys, numpy as np, zipsave, rllib_helpers\n"
        f"m = zipsave.load({str(ppo_zip)!r}, component={MODULE!r})\n"
        "import ray\n"
        "assert not ray.is_initialized()\n"
        "np.save(sys.argv[1], rllib_helpers.logits(m))\n"
        "print(type(m).__name__)\n"
    )
    out = ppo_zip.parent / "logits.npy"
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(ppo_zip.parent),
        env=_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "DefaultPPOTorchRLModule"
    np.testing.assert_array_equal(np.load(out), rllib_helpers.logits(ppo))


def _env():
    import os

    return dict(os.environ)


def test_restore_one_component_into_a_running_algorithm(ppo, ppo_zip, ray_session):
    other = rllib_helpers.ppo_config(seed=1).build_algo()
    try:
        assert not np.array_equal(rllib_helpers.logits(other), rllib_helpers.logits(ppo))
        before_iteration = other.training_iteration
        zipsave.restore(other, ppo_zip, component=MODULE)
        np.testing.assert_array_equal(rllib_helpers.logits(other), rllib_helpers.logits(ppo))
        assert other.training_iteration == before_iteration  # nothing else restored
        # the EnvRunner actor got the weights too (RLlib's restore syncs them)
        np.testing.assert_array_equal(rllib_helpers.remote_logits(other), rllib_helpers.logits(ppo))
    finally:
        other.stop()


def test_rllib_directory_to_archive_and_back(ppo, ray_session, tmp_path):
    from ray.rllib.algorithms.algorithm import Algorithm

    ppo.save_to_path(str(tmp_path / "rllib"))
    from_rllib(tmp_path / "rllib", tmp_path / "converted.zip")
    assert "learner_group/learner/rl_module/default_policy/module.pth" in {
        m.name for m in zipsave.inspect(tmp_path / "converted.zip").members
    }
    to_rllib(tmp_path / "converted.zip", tmp_path / "back", trusted=TRUST)
    algo = Algorithm.from_checkpoint(str(tmp_path / "back"))
    try:
        np.testing.assert_array_equal(rllib_helpers.logits(algo), rllib_helpers.logits(ppo))
        assert algo.training_iteration == ppo.training_iteration
        assert rllib_helpers.filter_pushes(rllib_helpers.remote_filter_state(algo)[0]) == rllib_helpers.filter_pushes(
            rllib_helpers.remote_filter_state(ppo)[0]
        )
        algo.train()
    finally:
        algo.stop()


def test_broken_component_is_skipped_with_a_warning(ppo_zip, tmp_path):
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(ppo_zip) as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            raw = src.read(item)
            if item.filename == "env_runner/env_to_module_connector/MeanStdFilter/data":
                raw = b"{not json"
            dst.writestr(item, raw)
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.ZipsaveWarning):
        algo = zipsave.load(broken, trusted=TRUST, report=report)
    try:
        assert report.skipped and any("MeanStdFilter" in e.member for e in report.skipped)
        assert algo.training_iteration >= 1
    finally:
        algo.stop()


def test_a_corrupt_tensor_member_is_an_error_not_fresh_weights(ppo_zip, tmp_path):
    # Unlike a component's unreadable `data`, a damaged tensor member is never skipped: the
    # algorithm would come back with weights other than the saved ones.
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(ppo_zip) as src:
        target = next(i for i in src.infolist() if i.filename.endswith(".pth") and "/" in i.filename)
        raw = bytearray(src.read(target))
        raw[len(raw) // 2] ^= 0xFF
        with zipfile.ZipFile(broken, "w") as dst:
            for item in src.infolist():
                dst.writestr(item, bytes(raw) if item.filename == target.filename else src.read(item))
    with pytest.raises(zipsave.IntegrityError, match=re.escape(target.filename)):
        zipsave.load(broken, trusted=TRUST)


def test_multi_agent_p1_swapped_in_on_algorithm_init_through_tune(ppo, ppo_zip, tmp_path):
    from ray import tune

    out = tmp_path / "p0p1.npy"
    config = rllib_helpers.multi_agent_config(ppo_zip, out)
    tuner = tune.Tuner(
        config.algo_class,
        param_space=config,
        run_config=tune.RunConfig(stop={"training_iteration": 1}, storage_path=str(tmp_path / "tune"), verbose=0),
    )
    results = tuner.fit()
    assert not results.errors, results.errors
    assert results[0].metrics["training_iteration"] == 1
    p0, p1 = np.load(out)
    np.testing.assert_array_equal(p1, rllib_helpers.logits(ppo))
    assert not np.array_equal(p0, p1)


def test_dqn_round_trip(ray_session, tmp_path):
    algo = rllib_helpers.dqn_config().build_algo()
    try:
        algo.train()
        zipsave.save(algo, tmp_path / "dqn.zip")
        expected = rllib_helpers.logits(algo)
        iteration = algo.training_iteration
    finally:
        algo.stop()
    names = {t.name for t in zipsave.inspect(tmp_path / "dqn.zip").tensors}
    assert any(n.startswith(MODULE + "/module/") and "target" in n for n in names)  # the target network too
    loaded = zipsave.load(tmp_path / "dqn.zip")
    try:
        np.testing.assert_array_equal(rllib_helpers.logits(loaded), expected)
        assert loaded.training_iteration == iteration
        loaded.train()
    finally:
        loaded.stop()


def test_atomic_save_keeps_the_old_archive(ppo, tmp_path):
    path = tmp_path / "ppo.zip"
    zipsave.save(ppo, path)
    before = path.read_bytes()
    import threading

    from zipsave.rllib._tree import walk

    node = walk(ppo)
    node.children["learner_group"].state["lock"] = threading.Lock()  # no JSON form, does not pickle
    with pytest.raises(zipsave.EncodeError, match=re.escape("`lock`")):
        zipsave.save(node, path)
    assert path.read_bytes() == before


def test_s3_url_round_trip(ppo, s3_url):
    url = s3_url + "/ppo.zip"
    opts = {"storage_options": {"skip_instance_cache": True}}
    zipsave.save(ppo, url, **opts)
    algo = zipsave.load(url, trusted=TRUST, **opts)
    try:
        np.testing.assert_array_equal(rllib_helpers.logits(algo), rllib_helpers.logits(ppo))
    finally:
        algo.stop()
    module = zipsave.load(url, component=MODULE, **opts)
    np.testing.assert_array_equal(rllib_helpers.logits(module), rllib_helpers.logits(ppo))
