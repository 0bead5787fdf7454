"""Stable-Baselines3 models trained on stacks of vectorised wrappers (``VecFrameStack`` around
``VecNormalize``): what the archive keeps of the step under way loads back as SB3 kept it."""

from __future__ import annotations

import numpy as np
import pytest

import zipsave

pytest.importorskip("stable_baselines3")
import gymnasium as gym  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecNormalize  # noqa: E402


def _stacked_normalized(n_envs=2):
    return VecFrameStack(VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")] * n_envs)), 3)


def test_original_observation_under_a_frame_stack_loads_with_force_reset_false(tmp_path):
    # SB3 keeps `_last_original_obs` as VecNormalize gives it, (2, 4) for two CartPoles, and the
    # frame stack above makes the model's observation space (12,): the check held it against
    # (12,), skipped it with a SkippedEntryWarning (an error under strict=True), and learn()
    # went on with None.
    env = _stacked_normalized()
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=8, n_epochs=1, policy_kwargs={"net_arch": [8]}, seed=0)
    model.learn(8)
    assert model._last_original_obs.shape == (2, 4) and model.observation_space.shape == (12,)
    model.save(tmp_path / "stacked.zip")
    loaded = zipsave.load(tmp_path / "stacked.zip", cls=PPO, env=env, force_reset=False, strict=True)
    assert np.array_equal(loaded._last_original_obs, model._last_original_obs)
    assert np.array_equal(loaded._last_obs, model._last_obs)
    loaded.learn(8, reset_num_timesteps=False)
