"""Archives as SB3 and the RL Zoo write them, read through every door: SB3's own ``load``,
``zipsave.load(path, cls=...)`` and SB3's ``load`` under ``zipsave.sb3.install()`` give the same
model, down to the optimizer's class and state. Each case is one a sweep of the Zoo's
hyperparameter files over every algorithm found refused or changed."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch as th

import zipsave
import zipsave.sb3

pytest.importorskip("stable_baselines3")
from stable_baselines3 import A2C  # noqa: E402


def _same_optimizer(loaded, reference):
    assert type(loaded.policy.optimizer) is type(reference.policy.optimizer)
    want, got = reference.policy.optimizer.state_dict(), loaded.policy.optimizer.state_dict()
    assert got["param_groups"] == want["param_groups"]
    for index, state in want["state"].items():
        for name, value in state.items():
            other = got["state"][index][name]
            assert th.equal(other, value) if isinstance(value, th.Tensor) else other == value, (index, name)


def _through_every_door(path, cls):
    """SB3's own load, then zipsave's two doors with the defaults: nothing may be skipped."""
    reference = cls.load(path, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", zipsave.ZipsaveWarning)
        loaded = zipsave.load(path, cls=cls, device="cpu")
        with zipsave.sb3.installed():
            adopted = cls.load(path, device="cpu")
    return reference, loaded, adopted


def test_the_zoos_atari_a2c_optimizer_loads_with_the_defaults(tmp_path):
    # a2c.yml's `atari` entry: policy_kwargs "dict(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(eps=1e-5))"
    from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

    kwargs = {"optimizer_class": RMSpropTFLike, "optimizer_kwargs": {"eps": 1e-5}, "net_arch": [8]}
    model = A2C("MlpPolicy", "CartPole-v1", n_steps=8, policy_kwargs=kwargs, seed=0)
    model.learn(16)
    model.save(tmp_path / "a2c.zip")
    reference, *doors = _through_every_door(tmp_path / "a2c.zip", A2C)
    for loaded in doors:
        assert loaded.policy_kwargs == reference.policy_kwargs
        assert isinstance(loaded.policy.optimizer, RMSpropTFLike)
        _same_optimizer(loaded, reference)


def test_a_recurrent_ppo_archive_with_its_lstm_states_loads_without_a_warning(tmp_path):
    # sb3-contrib before `_last_lstm_states` joined `_excluded_save_params` (2.3 still stored it,
    # as every RecurrentPPO agent the RL Zoo trained with it): `include=` writes the same entry.
    sb3_contrib = pytest.importorskip("sb3_contrib")
    model = sb3_contrib.RecurrentPPO(
        "MlpLstmPolicy", "CartPole-v1", n_steps=16, batch_size=16, n_epochs=1, seed=0,
        policy_kwargs={"net_arch": [8], "lstm_hidden_size": 8},
    )  # fmt: skip
    model.learn(16)
    model.save(tmp_path / "rppo.zip", include=["_last_lstm_states"])
    reference, *doors = _through_every_door(tmp_path / "rppo.zip", sb3_contrib.RecurrentPPO)
    for loaded in doors:
        # SB3's `load` sets the saved states and `_setup_model` then zeroes them, through every door
        for mine, theirs in zip(loaded._last_lstm_states, reference._last_lstm_states):
            assert all(th.equal(a, b) for a, b in zip(mine, theirs))
        _same_optimizer(loaded, reference)


@pytest.mark.parametrize("door", ["zipsave.load", "PPO.load under install()"])
def test_an_env_that_does_not_fit_is_blamed_on_the_env_not_the_archive(tmp_path, door):
    # An archive written with gymnasium < 1.0 (CartPole's unbounded velocities as float32's
    # largest value) loaded with today's CartPole (inf): SB3 raises ValueError; the archive is fine.
    import gymnasium as gym
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, n_epochs=1, policy_kwargs={"net_arch": [8]})
    high = np.finfo(np.float32).max
    model.observation_space = gym.spaces.Box(
        np.array([-4.8, -high, -0.42, -high], np.float32), np.array([4.8, high, 0.42, high], np.float32)
    )
    path = tmp_path / "old_gymnasium.zip"
    model.save(path)
    with pytest.raises(ValueError, match="Observation spaces do not match") as sb3_error:
        PPO.load(path, env=gym.make("CartPole-v1"))
    with pytest.raises(zipsave.ParameterMismatchError) as caught:
        if door == "zipsave.load":
            zipsave.load(path, cls=PPO, env=gym.make("CartPole-v1"))
        else:
            with zipsave.sb3.installed():
                PPO.load(path, env=gym.make("CartPole-v1"))
    assert isinstance(caught.value, ValueError) and not isinstance(caught.value, zipsave.ArchiveFormatError)
    assert str(sb3_error.value) in str(caught.value) and "`env`" in str(caught.value)
    assert "damaged" not in str(caught.value)
