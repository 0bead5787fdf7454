"""``zipsave.sb3.install()``: SB3's own save/load, policies, replay buffers, VecNormalize and
callbacks through zipsave. Every test states SB3's documented behaviour and checks it holds
under install(), plus what zipsave adds (manifest, safe loads)."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import pickle
import re
import subprocess
import sys
import threading
import warnings
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch

import zipsave

sb3 = pytest.importorskip("stable_baselines3")  # the `test` extra installs it

from stable_baselines3 import DQN, PPO, SAC  # noqa: E402
from stable_baselines3.common import base_class, off_policy_algorithm, save_util  # noqa: E402
from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback  # noqa: E402
from stable_baselines3.common.policies import ActorCriticPolicy, BaseModel  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize  # noqa: E402

import zipsave.sb3  # noqa: E402

SB3_FUNCTIONS = {
    name: getattr(save_util, name)
    for name in ("save_to_zip_file", "load_from_zip_file", "save_to_pkl", "load_from_pkl")
}
SB3_METHODS = {
    (BaseModel, "save"): BaseModel.__dict__["save"],
    (BaseModel, "load"): BaseModel.__dict__["load"],
    (VecNormalize, "load"): VecNormalize.__dict__["load"],
}


class NotAllowlisted:
    """A value whose pickle names a global no allowlist holds."""

    def __init__(self, x: int = 3) -> None:
        self.x = x


def ppo(**kwargs):
    return PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu", **kwargs)


def obs_batch():
    return np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)


def actions(model):
    return model.predict(obs_batch(), deterministic=True)[0]


# -- the switch --------------------------------------------------------------------------------
def test_importing_zipsave_or_zipsave_sb3_does_not_import_sb3():
    code = "import sys, zipsave, zipsave.sb3; print('stable_baselines3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_install_replaces_every_lookup_and_uninstall_restores_sb3():
    import sb3_contrib.ars.ars as ars

    zipsave.sb3.install()
    zipsave.sb3.install()  # twice is harmless
    try:
        for module in (base_class, off_policy_algorithm, save_util):
            for name in ("save_to_zip_file", "load_from_zip_file", "save_to_pkl", "load_from_pkl"):
                if hasattr(module, name):
                    assert getattr(module, name) is not SB3_FUNCTIONS[name], (module.__name__, name)
                    assert getattr(module, name).__module__ == "zipsave.sb3._replace"
        assert ars.load_from_zip_file is not SB3_FUNCTIONS["load_from_zip_file"]
        assert BaseModel.__dict__["save"] is not SB3_METHODS[(BaseModel, "save")]
        assert zipsave.sb3.is_installed()
    finally:
        zipsave.sb3.uninstall()
    zipsave.sb3.uninstall()  # twice is harmless too
    assert not zipsave.sb3.is_installed()
    assert base_class.load_from_zip_file is SB3_FUNCTIONS["load_from_zip_file"]
    assert base_class.save_to_zip_file is SB3_FUNCTIONS["save_to_zip_file"]
    assert off_policy_algorithm.save_to_pkl is SB3_FUNCTIONS["save_to_pkl"]
    assert ars.load_from_zip_file is SB3_FUNCTIONS["load_from_zip_file"]
    for (owner, attr), original in SB3_METHODS.items():
        assert owner.__dict__[attr] is original


def test_context_manager_restores_the_previous_state(tmp_path):
    with zipsave.sb3.installed():
        assert zipsave.sb3.is_installed()
        with zipsave.sb3.installed(strict=True):
            assert zipsave.sb3._install.current_options().strict
        assert zipsave.sb3.is_installed() and not zipsave.sb3._install.current_options().strict
    assert not zipsave.sb3.is_installed()
    assert base_class.load_from_zip_file is SB3_FUNCTIONS["load_from_zip_file"]


def test_bad_options_are_refused_before_anything_changes():
    with pytest.raises(TypeError, match=re.escape("`allow_pickle` must be True or False, got 'no'.")):
        zipsave.sb3.install(allow_pickle="no")
    assert not zipsave.sb3.is_installed()


# -- BaseAlgorithm.save / load / set_parameters ------------------------------------------------
def test_model_save_writes_a_zipsave_archive_that_sb3_reads_back(tmp_path, installed):
    model = ppo()
    model.save(tmp_path / "ppo")  # pathlib path without suffix: SB3 adds .zip
    path = tmp_path / "ppo.zip"
    names = zipfile.ZipFile(path).namelist()
    assert "manifest.json" in names and "policy.pth" in names and "data" in names
    loaded = PPO.load(tmp_path / "ppo", device="cpu")
    np.testing.assert_array_equal(actions(loaded), actions(model))
    assert loaded.lr_schedule(0.5) == model.lr_schedule(0.5)
    assert loaded.clip_range(0.5) == model.clip_range(0.5)
    zipsave.sb3.uninstall()
    again = PPO.load(path, device="cpu")  # SB3's own loader reads it too
    np.testing.assert_array_equal(actions(again), actions(model))


def test_file_objects_are_written_and_read_and_left_open(installed):
    model = ppo()
    buffer = io.BytesIO()
    model.save(buffer)
    assert not buffer.closed
    buffer.seek(0)
    loaded = PPO.load(buffer, device="cpu")
    assert not buffer.closed
    np.testing.assert_array_equal(actions(loaded), actions(model))


def test_missing_file_raises_file_not_found(tmp_path, installed):
    with pytest.raises(FileNotFoundError, match=re.escape("also tried")):
        PPO.load(tmp_path / "nothing")


def test_missing_file_is_zipsave_error_naming_the_archive(tmp_path, installed):
    # as zipsave.load raises it: an ArchiveNotFoundError (a FileNotFoundError too, as SB3's)
    missing = tmp_path / "nothing"
    for call in (lambda: PPO.load(missing), lambda: ppo().set_parameters(missing)):
        with pytest.raises(
            zipsave.ArchiveNotFoundError,
            match=re.escape(f"archive `{missing}`: no such file (also tried `{missing}.zip`). Check the path"),
        ) as err:
            call()
        assert err.value.errno == errno.ENOENT


def test_exclude_and_include_follow_sb3(tmp_path, installed):
    model = ppo()
    model.save(tmp_path / "m.zip", exclude=["gamma"], include=["device"])
    data = json.loads(zipfile.ZipFile(tmp_path / "m.zip").read("data"))
    assert "gamma" not in data and "device" in data
    loaded = PPO.load(tmp_path / "m.zip", device="cpu")
    assert loaded.gamma == 0.99  # the constructor default, as with SB3


def test_set_parameters_exact_match(tmp_path, installed):
    model = ppo()
    model.save(tmp_path / "m.zip")
    other = PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=1, device="cpu")
    other.set_parameters(tmp_path / "m.zip")
    for a, b in zip(other.policy.parameters(), model.policy.parameters()):
        torch.testing.assert_close(a, b)
    partial = {"policy": model.policy.state_dict()}
    with pytest.raises(ValueError, match="Names of parameters do not match"):
        other.set_parameters(partial, exact_match=True)
    other.set_parameters(partial, exact_match=False)


def test_load_data_false_returns_no_data(tmp_path, installed):
    ppo().save(tmp_path / "m.zip")
    data, params, variables = base_class.load_from_zip_file(tmp_path / "m.zip", load_data=False)
    assert data is None
    assert set(params) == {"policy", "policy.optimizer"}


def test_undecodable_value_is_skipped_with_a_warning_and_custom_objects_replace_it_silently(tmp_path, installed):
    model = ppo()
    model.odd = NotAllowlisted()
    model.save(tmp_path / "m.zip")
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("skipped key `odd`")):
        loaded = PPO.load(tmp_path / "m.zip", device="cpu")
    assert not hasattr(loaded, "odd")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not a single warning of any kind
        replaced = PPO.load(tmp_path / "m.zip", device="cpu", custom_objects={"odd": 7})
    assert replaced.odd == 7


def test_trusted_and_strict_apply_to_every_load(tmp_path):
    model = ppo()
    model.odd = NotAllowlisted(5)
    with zipsave.sb3.installed():
        model.save(tmp_path / "m.zip")
    with zipsave.sb3.installed(trusted=[NotAllowlisted]):
        assert PPO.load(tmp_path / "m.zip", device="cpu").odd.x == 5
    with zipsave.sb3.installed(strict=True):
        with pytest.raises(zipsave.UnsafeGlobalError, match=re.escape("key `odd`")):
            PPO.load(tmp_path / "m.zip", device="cpu")


def test_print_system_info_prints_saved_current_and_differences_once(tmp_path, capsys, installed):
    ppo().save(tmp_path / "m.zip")
    capsys.readouterr()
    PPO.load(tmp_path / "m.zip", device="cpu", print_system_info=True)
    out = capsys.readouterr().out
    for heading in ("== SAVED MODEL SYSTEM INFO ==", "== CURRENT SYSTEM INFO ==", "== DIFFERENCES THAT MATTER =="):
        assert out.count(heading) == 1, heading
    assert "zipsave" in out


def test_a_failed_save_leaves_the_previous_archive(tmp_path, installed):
    model = ppo()
    model.save(tmp_path / "m.zip")
    before = (tmp_path / "m.zip").read_bytes()
    model.bad = threading.Lock()  # neither JSON nor picklable
    with pytest.raises(zipsave.EncodeError):
        model.save(tmp_path / "m.zip")
    assert (tmp_path / "m.zip").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.zip"]


# -- replay buffers, policies, VecNormalize ----------------------------------------------------
def dqn(**kwargs):
    return DQN("MlpPolicy", "CartPole-v1", buffer_size=200, learning_starts=20, seed=0, device="cpu", **kwargs)


def test_replay_buffer_round_trip_without_pickle(tmp_path, installed):
    model = dqn()
    model.learn(60)
    model.save_replay_buffer(tmp_path / "buffer")  # SB3 adds .pkl
    path = tmp_path / "buffer.pkl"
    names = zipfile.ZipFile(path).namelist()
    assert "manifest.json" in names
    fresh = dqn()
    fresh.load_replay_buffer(tmp_path / "buffer")
    saved, loaded = model.replay_buffer, fresh.replay_buffer
    assert type(loaded) is type(saved) and (loaded.pos, loaded.full) == (saved.pos, saved.full)
    for name in ("observations", "actions", "rewards", "dones", "timeouts"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(saved, name))


def test_replay_buffer_pickled_by_sb3_loads_safely(tmp_path):
    model = dqn()
    model.learn(30)
    model.save_replay_buffer(tmp_path / "sb3_buffer.pkl")  # SB3's own pickle
    with zipsave.sb3.installed():
        fresh = dqn()
        fresh.load_replay_buffer(tmp_path / "sb3_buffer.pkl")
    np.testing.assert_array_equal(fresh.replay_buffer.observations, model.replay_buffer.observations)


@pytest.mark.parametrize("writer", ["sb3", "zipsave", "model archive"])
def test_a_buffer_of_another_environment_is_refused_and_the_model_keeps_its_own(tmp_path, writer):
    # it loaded, and the next learn() failed in numpy: could not broadcast (1,3) into (1,4); the
    # model archive's replay_buffer/ folder was refused as a DecodeError ("array `observations`
    # is float32[200, 1, 4], expected float32[200, 1, 6]"), the file as a ParameterMismatchError
    model = dqn()
    model.learn(30)
    path, where = tmp_path / "buffer.pkl", ""
    if writer == "model archive":
        path, where = tmp_path / "model.zip", ", member `replay_buffer/data`"
        zipsave.save(model, path, include=["replay_buffer"])
    with zipsave.sb3.installed() if writer == "zipsave" else contextlib.nullcontext():
        if writer != "model archive":
            model.save_replay_buffer(path)
    other = DQN("MlpPolicy", "Acrobot-v1", buffer_size=200, learning_starts=0, seed=0, device="cpu")
    own = other.replay_buffer
    with zipsave.sb3.installed():
        with pytest.raises(
            zipsave.ParameterMismatchError,
            match=re.escape(
                f"archive `{path}`{where}: holds a replay buffer of transitions with observations of "
                "shape (4,) and actions of size 1"
            ),
        ) as err:
            other.load_replay_buffer(path)
    assert "but this DQN has observation_space=Box(" in str(err.value)
    assert "whose transitions have (6,) and 1: training would fail at its first add or sample." in str(err.value)
    assert other.replay_buffer is own
    other.learn(20)


def test_a_pickle_given_as_a_model_names_the_safe_doors_that_read_it(tmp_path):
    # the hint said only that SB3's `load_replay_buffer` runs the pickle's code, also for a
    # VecNormalize pickle; the doors under install() read both under the allowlist
    venv = VecNormalize(make_venv())
    venv.save(tmp_path / "vecnormalize.pkl")  # SB3's own pickle
    with pytest.raises(
        zipsave.ArchiveFormatError,
        match=re.escape(
            "is a pickle file, not a zip archive. zipsave reads zip archives and never unpickles. SB3's "
            "`save_replay_buffer` and `VecNormalize.save` write such files: read one with "
            "`model.load_replay_buffer(path)` or `VecNormalize.load(path, venv)` under `zipsave.sb3.install()`"
        ),
    ):
        zipsave.load(tmp_path / "vecnormalize.pkl", cls=PPO)
    with zipsave.sb3.installed():
        loaded = VecNormalize.load(tmp_path / "vecnormalize.pkl", make_venv())
    np.testing.assert_array_equal(loaded.obs_rms.mean, venv.obs_rms.mean)


def test_policy_save_and_load(tmp_path, installed):
    model = ppo()
    model.policy.save(tmp_path / "policy.pth")
    assert "manifest.json" in zipfile.ZipFile(tmp_path / "policy.pth").namelist()
    policy = ActorCriticPolicy.load(tmp_path / "policy.pth")
    obs = torch.as_tensor(obs_batch())
    torch.testing.assert_close(policy(obs, deterministic=True)[0], model.policy(obs, deterministic=True)[0])


def test_sac_actor_with_its_features_extractor_round_trips(tmp_path, installed):
    model = SAC("MlpPolicy", "Pendulum-v1", buffer_size=100, seed=0, device="cpu")
    model.actor.save(tmp_path / "actor.pkl")
    actor = type(model.actor).load(tmp_path / "actor.pkl")
    obs = torch.zeros(2, 3)
    torch.testing.assert_close(actor(obs, deterministic=True), model.actor(obs, deterministic=True))


def test_policy_pickled_by_sb3_loads_safely(tmp_path):
    # SB3's own `policy.save` is torch.save of {"state_dict", "data"}: its data.pkl is read by
    # the restricted unpickler, its storages from the file's records; nothing runs.
    model = ppo()
    model.policy.save(tmp_path / "sb3_policy.pth")  # torch.save, SB3's own
    with zipsave.sb3.installed(), warnings.catch_warnings():
        warnings.simplefilter("error")
        policy = ActorCriticPolicy.load(tmp_path / "sb3_policy.pth")
    assert isinstance(policy, ActorCriticPolicy)
    for key, value in model.policy.state_dict().items():
        assert torch.equal(policy.state_dict()[key], value)
    with zipsave.sb3.installed(allow_pickle=True):
        assert isinstance(ActorCriticPolicy.load(tmp_path / "sb3_policy.pth"), ActorCriticPolicy)


def _rewrite_member(path, target, transform):
    with zipfile.ZipFile(path) as zf:
        items = [(info.filename, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in items:
            zf.writestr(name, transform(raw) if name.endswith(target) else raw)


def test_a_tampered_sb3_policy_file_is_refused_and_never_runs(tmp_path):
    model = ppo()
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pth"
    model.policy.save(evil)
    payload = pickle.dumps({"state_dict": {}, "data": {"x": _Call(os.system, f"touch {marker}")}}, protocol=2)
    _rewrite_member(evil, "/data.pkl", lambda raw: payload)
    with zipsave.sb3.installed(), pytest.raises(zipsave.UnsafeGlobalError, match="system"):
        ActorCriticPolicy.load(evil)
    assert not marker.exists()
    short = tmp_path / "short.pth"
    model.policy.save(short)
    _rewrite_member(short, "/data/0", lambda raw: raw[:-4])  # a storage record shorter than declared
    with zipsave.sb3.installed(), pytest.raises(zipsave.DecodeError, match="its reference declares"):
        ActorCriticPolicy.load(short)


class _Call:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def make_venv():
    return DummyVecEnv([lambda: gym.make("CartPole-v1")])


def test_vec_normalize_save_and_load(tmp_path, installed):
    venv = VecNormalize(make_venv())
    venv.reset()
    for _ in range(5):
        venv.step(np.array([1]))
    venv.save(tmp_path / "vecnormalize.pkl")
    assert "manifest.json" in zipfile.ZipFile(tmp_path / "vecnormalize.pkl").namelist()
    loaded = VecNormalize.load(tmp_path / "vecnormalize.pkl", make_venv())
    np.testing.assert_array_equal(loaded.obs_rms.mean, venv.obs_rms.mean)
    np.testing.assert_array_equal(loaded.ret_rms.var, venv.ret_rms.var)
    assert loaded.venv is not None and loaded.clip_obs == venv.clip_obs


# -- callbacks ---------------------------------------------------------------------------------
def test_checkpoint_callback_writes_loadable_archives(tmp_path, installed):
    env = VecNormalize(make_venv())
    model = DQN("MlpPolicy", env, buffer_size=200, learning_starts=10, seed=0, device="cpu")
    callback = CheckpointCallback(
        save_freq=40, save_path=str(tmp_path), name_prefix="dqn", save_replay_buffer=True, save_vecnormalize=True
    )
    model.learn(40, callback=callback)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["dqn_40_steps.zip", "dqn_replay_buffer_40_steps.pkl", "dqn_vecnormalize_40_steps.pkl"]
    for name in files:
        assert "manifest.json" in zipfile.ZipFile(tmp_path / name).namelist(), name
    loaded = DQN.load(tmp_path / "dqn_40_steps.zip", device="cpu")
    assert loaded.num_timesteps == 40
    loaded.load_replay_buffer(tmp_path / "dqn_replay_buffer_40_steps.pkl")
    pos = loaded.replay_buffer.pos  # the callback runs before the 40th transition is stored
    assert pos == model.replay_buffer.pos - 1
    np.testing.assert_array_equal(loaded.replay_buffer.observations[:pos], model.replay_buffer.observations[:pos])
    stats = VecNormalize.load(str(tmp_path / "dqn_vecnormalize_40_steps.pkl"), make_venv())
    np.testing.assert_array_equal(stats.obs_rms.mean, env.obs_rms.mean)


def test_eval_callback_best_model_loads(tmp_path, installed):
    model = ppo()
    from stable_baselines3.common.monitor import Monitor

    eval_env = DummyVecEnv([lambda: Monitor(gym.make("CartPole-v1"))])
    callback = EvalCallback(eval_env, n_eval_episodes=1, eval_freq=32, best_model_save_path=str(tmp_path), verbose=0)
    before = actions(model)  # the evaluation at step 32 runs before that rollout's update
    model.learn(32, callback=callback)
    path = tmp_path / "best_model.zip"
    assert "manifest.json" in zipfile.ZipFile(path).namelist()
    best = zipsave.load(path, cls=PPO, device="cpu")  # zipsave's own loader, defaults
    np.testing.assert_array_equal(actions(best), before)
    assert best.num_timesteps == 32


# -- sb3-contrib -------------------------------------------------------------------------------
def test_sb3_contrib_models_save_and_load_with_the_defaults(tmp_path, installed):
    contrib = pytest.importorskip("sb3_contrib")
    for cls, env, kwargs in (
        (contrib.QRDQN, "CartPole-v1", {"buffer_size": 100}),
        (contrib.TRPO, "CartPole-v1", {"n_steps": 64, "batch_size": 32}),
        (contrib.RecurrentPPO, "CartPole-v1", {"n_steps": 32, "batch_size": 32}),
        (contrib.ARS, "CartPole-v1", {"n_delta": 2}),
    ):
        model = cls(
            "MlpPolicy" if cls is not contrib.RecurrentPPO else "MlpLstmPolicy", env, seed=0, device="cpu", **kwargs
        )
        model.save(tmp_path / cls.__name__)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the defaults decode everything: no skipped entry
            loaded = cls.load(tmp_path / cls.__name__, device="cpu")
        np.testing.assert_array_equal(actions(loaded), actions(model), err_msg=cls.__name__)
        if cls is contrib.ARS:  # ARS imports load_from_zip_file itself
            fresh = cls("MlpPolicy", env, seed=1, device="cpu", **kwargs)
            fresh.set_parameters(tmp_path / "ARS.zip")
            np.testing.assert_array_equal(actions(fresh), actions(model))


# -- the runner --------------------------------------------------------------------------------
def test_runner_runs_a_module_as_main_with_its_arguments(tmp_path, monkeypatch):
    from zipsave.sb3.__main__ import main

    (tmp_path / "adoptprobe.py").write_text(
        "import sys\n"
        "from stable_baselines3.common import base_class\n"
        "import zipsave.sb3._install as state\n"
        "if __name__ == '__main__':\n"
        "    RESULT = (list(sys.argv), base_class.save_to_zip_file.__module__, state.current_options())\n"
        "    sys.modules['adoptprobe_result'] = RESULT\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    try:
        assert main(["--trust", "mypkg.*", "--strict", "adoptprobe", "--flag", "x"]) == 0
        argv, module, options = sys.modules.pop("adoptprobe_result")
    finally:
        zipsave.sb3.uninstall()
    assert argv[1:] == ["--flag", "x"] and argv[0].endswith("adoptprobe.py")
    assert module == "zipsave.sb3._replace"
    assert options.trusted == ("mypkg.",) and options.strict and not options.allow_pickle


def test_runner_without_a_module_prints_usage(capsys):
    from zipsave.sb3.__main__ import main

    assert main([]) == 2
    assert "usage: python -m zipsave.sb3" in capsys.readouterr().err
    assert main(["--bogus", "mod"]) == 2
    assert "unknown option '--bogus'" in capsys.readouterr().err
    assert not zipsave.sb3.is_installed()
