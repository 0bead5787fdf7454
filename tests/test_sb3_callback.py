"""zipsave.sb3.CheckpointCallback: a real SB3 callback that checkpoints through the manager,
with exact resume of PPO, background saves that equal blocking ones, and the replay buffer
and VecNormalize in the same archive."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import zipsave

pytest.importorskip("stable_baselines3")

from stable_baselines3 import DQN, PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import VecNormalize  # noqa: E402

import zipsave.sb3  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def make_ppo(seed: int) -> PPO:
    env = VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=seed), norm_reward=True)
    return PPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=2, seed=seed)


def same_state(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


class StopAt(zipsave.sb3.CheckpointCallback):
    """Stops training inside a rollout, as a crash would."""

    def __init__(self, *args, stop_at: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stop_at = stop_at

    def _on_step(self) -> bool:
        return self.num_timesteps < self.stop_at


def test_is_an_sb3_callback(tmp_path):
    callback = zipsave.sb3.CheckpointCallback(tmp_path, every_steps=100)
    assert isinstance(callback, BaseCallback)
    assert repr(callback) == f"<CheckpointCallback <CheckpointManager '{tmp_path}': 0 checkpoints; every_steps=100>>"
    callback.close()


def test_sb3s_own_arguments_say_what_this_callback_takes_instead(tmp_path):
    # CheckpointCallback(save_freq=1000, save_path="logs", name_prefix="rl_model"), SB3's own
    # spelling, was "unexpected keyword argument 'save_freq'" (and, without them, a missing
    # `directory`), with no word of every_steps or of SB3's own callback under install().
    with pytest.raises(TypeError, match=re.escape("does not take SB3's arguments ['save_freq', 'save_path']")) as err:
        zipsave.sb3.CheckpointCallback(save_freq=1000, save_path=str(tmp_path / "logs"))
    message = str(err.value)
    assert "`every_steps=`" in message and "zipsave.sb3.install()" in message
    with pytest.raises(TypeError, match=re.escape("got unexpected keyword arguments ['every_step']")):
        zipsave.sb3.CheckpointCallback(tmp_path, every_step=5)
    assert list(tmp_path.iterdir()) == []


def test_importing_zipsave_does_not_import_sb3():
    code = "import sys, zipsave, zipsave.sb3; assert 'stable_baselines3' not in sys.modules, 'imported'"
    env = {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


def test_ppo_stopped_and_resumed_is_bit_identical(tmp_path):
    uninterrupted = make_ppo(0)
    callback = zipsave.sb3.CheckpointCallback(tmp_path / "a", every_steps=64, env_state=True)
    uninterrupted.learn(256, callback=callback, reset_num_timesteps=False)
    assert [c.step for c in callback.manager.list()] == [64, 128, 192, 256]
    assert set(callback.manager.latest().metrics) == {"ep_rew_mean", "ep_len_mean"}
    callback.close()

    stopped = make_ppo(0)
    callback = StopAt(tmp_path / "b", every_steps=64, env_state=True, stop_at=160)
    stopped.learn(256, callback=callback, reset_num_timesteps=False)
    # no checkpoint where training stopped, inside a rollout: it could not be resumed exactly
    assert [c.step for c in callback.manager.list()] == [64, 128]
    callback.close()

    resumed = make_ppo(7)  # another seed: everything that matters comes from the checkpoint
    callback = zipsave.sb3.CheckpointCallback(tmp_path / "b", every_steps=64, env_state=True)
    assert callback.restore_latest(resumed).step == resumed.num_timesteps == 128
    resumed.learn(256 - resumed.num_timesteps, callback=callback, reset_num_timesteps=False)
    callback.close()

    assert resumed.num_timesteps == 256
    assert same_state(resumed.policy, uninterrupted.policy)
    assert str(resumed.policy.optimizer.state_dict()) == str(uninterrupted.policy.optimizer.state_dict())
    a, b = resumed.get_vec_normalize_env(), uninterrupted.get_vec_normalize_env()
    assert np.array_equal(a.obs_rms.mean, b.obs_rms.mean) and np.array_equal(a.returns, b.returns)
    with zipfile.ZipFile(tmp_path / "b" / "step-0000000256.zip") as zf:
        assert "vec_normalize/data" in zf.namelist()
    by_sb3 = PPO.load(tmp_path / "b" / "step-0000000256.zip")  # SB3's own loader reads a checkpoint
    assert by_sb3.num_timesteps == 256 and same_state(by_sb3.policy, uninterrupted.policy)


def test_resume_without_env_state_resets_the_environments(tmp_path):
    model = make_ppo(0)
    callback = zipsave.sb3.CheckpointCallback(tmp_path, every_steps=64, keep_last=1)
    model.learn(128, callback=callback)
    callback.close()

    resumed = make_ppo(1)
    callback = zipsave.sb3.CheckpointCallback(tmp_path, every_steps=64, keep_last=1)
    assert callback.restore_latest(resumed).step == 128
    assert resumed._last_obs is None and same_state(resumed.policy, model.policy)
    assert len(resumed.ep_info_buffer) == len(model.ep_info_buffer) > 0
    resumed.learn(64, callback=callback, reset_num_timesteps=False)
    assert [c.step for c in callback.manager.list()] == [192]
    callback.close()


def test_a_first_run_starts_fresh(tmp_path):
    model = make_ppo(0)
    callback = zipsave.sb3.CheckpointCallback(tmp_path, every_steps=64)
    assert callback.restore_latest(model) is None and model.num_timesteps == 0
    model.learn(64, callback=callback, reset_num_timesteps=False)
    assert [c.step for c in callback.manager.list()] == [64]
    callback.close()


def test_background_saves_equal_blocking_saves(tmp_path):
    """Checkpoints are snapshots of the call: training on while the archive is written
    changes nothing in it, and checkpointing changes nothing in training."""
    runs = {}
    for background in (False, True):
        model = make_ppo(0)
        callback = zipsave.sb3.CheckpointCallback(tmp_path / str(background), every_steps=64, background=background)
        model.learn(192, callback=callback)
        runs[background] = (model, callback.manager.list())
        callback.close()
    plain = make_ppo(0)
    plain.learn(192)
    assert same_state(runs[True][0].policy, plain.policy) and same_state(runs[False][0].policy, plain.policy)
    blocking, background = runs[False][1], runs[True][1]
    assert [c.step for c in blocking] == [c.step for c in background] == [64, 128, 192]
    for a, b in zip(blocking, background):
        left, right = (zipsave.load(c.path, cls=PPO, exclude=["vec_normalize"]) for c in (a, b))
        assert same_state(left.policy, right.policy) and left.num_timesteps == right.num_timesteps == a.step


def test_dqn_replay_buffer_and_best_policy(tmp_path):
    def make(seed):
        env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)
        return DQN("MlpPolicy", env, buffer_size=500, learning_starts=50, train_freq=4, seed=seed)

    model = make(0)
    callback = zipsave.sb3.CheckpointCallback(
        tmp_path,
        every_steps=100,
        keep_last=1,
        keep_best=("ep_rew_mean", "max"),
        metrics=lambda m: {"eps": m.exploration_rate},
    )
    model.learn(400, callback=callback)
    callback.close()
    checkpoints = callback.manager.list()
    assert checkpoints[-1].step == 400 and 1 <= len(checkpoints) <= 2
    assert "eps" in checkpoints[-1].metrics
    with zipfile.ZipFile(checkpoints[-1].path) as zf:
        assert "replay_buffer/data" in zf.namelist()

    resumed = make(1)
    callback = zipsave.sb3.CheckpointCallback(tmp_path, every_steps=100, keep_last=1, keep_best=("ep_rew_mean", "max"))
    assert callback.restore_latest(resumed).step == 400
    assert resumed.replay_buffer.pos == model.replay_buffer.pos
    assert np.array_equal(resumed.replay_buffer.observations, model.replay_buffer.observations)
    assert callback.manager.best().metrics["ep_rew_mean"] == max(c.metrics["ep_rew_mean"] for c in checkpoints)
    callback.close()


def test_without_sb3_the_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # as if not installed
    with pytest.raises(
        zipsave.MissingDependencyError, match=re.escape("`zipsave.sb3.CheckpointCallback` needs `stable-baselines3`")
    ):
        zipsave.sb3.CheckpointCallback  # noqa: B018
    with pytest.raises(zipsave.MissingDependencyError, match=re.escape("pip install zipsave[sb3]")):
        zipsave.sb3.VecEnvState  # noqa: B018
