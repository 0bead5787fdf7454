"""A new user's round thirteen: what they did, what zipsave said, and what it says now. Each
test failed on the tree before its fix."""

from __future__ import annotations

import re

import pytest

import zipsave

pytest.importorskip("stable_baselines3")  # the `test` extra installs it

from stable_baselines3 import A2C, PPO, SAC, TD3  # noqa: E402


def _ppo(**kwargs):
    return PPO(
        "MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=1, policy_kwargs={"net_arch": [8]}, **kwargs
    )


def _a2c():
    return A2C("MlpPolicy", "CartPole-v1", policy_kwargs={"net_arch": [8]})


def test_a_sac_archive_restored_into_a_ppo_names_both_algorithms(tmp_path):
    # it said "holds state dicts [...], but the object has [...]" and "pass exact_match=False"
    zipsave.save(
        SAC("MlpPolicy", "Pendulum-v1", buffer_size=100, policy_kwargs={"net_arch": [8]}), tmp_path / "sac.zip"
    )
    with pytest.raises(zipsave.ParameterMismatchError) as caught:
        zipsave.restore(_ppo(), tmp_path / "sac.zip")
    text = str(caught.value)
    assert "holds a SAC model, which cannot be restored into the PPO given: its state dicts are [" in text
    assert "zipsave.load(path, cls=SAC)` (`from stable_baselines3 import SAC`)" in text
    assert "exact_match=False" not in text


def test_a_ppo_archive_restored_into_an_a2c_is_refused_before_anything_is_set(tmp_path):
    # the two hold the same state dicts: the restore returned, the A2C held PPO's n_steps=32 and
    # its first learn raised IndexError inside SB3's rollout buffer
    zipsave.save(_ppo(), tmp_path / "ppo.zip")
    a2c = _a2c()
    with pytest.raises(
        zipsave.ParameterMismatchError,
        match=re.escape(
            "holds a PPO model, which cannot be restored into the A2C given. Restore it into a model of PPO"
        ),
    ):
        zipsave.restore(a2c, tmp_path / "ppo.zip")
    assert a2c.n_steps == 5 and not hasattr(a2c, "clip_range")
    a2c.learn(10)
    zipsave.save(_a2c(), tmp_path / "a2c.zip")
    with pytest.raises(
        zipsave.ParameterMismatchError, match=re.escape("holds an A2C model, which cannot be restored into the PPO")
    ):
        zipsave.restore(_ppo(), tmp_path / "a2c.zip")


def test_a_restore_into_the_algorithm_that_saved_it_or_a_subclass_goes_on(tmp_path):
    class MyPPO(PPO):
        pass

    zipsave.save(_ppo(), tmp_path / "ppo.zip")
    zipsave.restore(
        MyPPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, policy_kwargs={"net_arch": [8]}),
        tmp_path / "ppo.zip",
    )
    # a TD3 with policy_delay=1 is what the archive calls DDPG; a TD3 takes it
    td3 = TD3("MlpPolicy", "Pendulum-v1", buffer_size=100, policy_delay=1, policy_kwargs={"net_arch": [8]})
    zipsave.save(td3, tmp_path / "td3.zip")
    zipsave.restore(
        TD3("MlpPolicy", "Pendulum-v1", buffer_size=100, policy_kwargs={"net_arch": [8]}), tmp_path / "td3.zip"
    )
