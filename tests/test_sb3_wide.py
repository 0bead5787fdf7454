"""Stable-Baselines3 support as a new user meets it, on models and archives the other SB3 tests do
not cover: schedules made by SB3's helper functions, SB3's own ``load`` under ``install()``,
classes stored by value, ``zipsave diff`` of undecodable values, and every algorithm of SB3 and
sb3-contrib with non-default policies and spaces, saved by one library and loaded by the other."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch as th

import zipsave
import zipsave.sb3

pytest.importorskip("stable_baselines3")
import gymnasium as gym  # noqa: E402
from stable_baselines3 import DQN, PPO  # noqa: E402
from stable_baselines3.common import utils  # noqa: E402


def _quietly(make, *args, **kwargs):
    """SB3's deprecated schedule helpers warn when called; the tests are about what follows."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return make(*args, **kwargs)


def _ppo(**kwargs):
    kwargs.setdefault("policy_kwargs", {"net_arch": [8]})
    return PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=1, seed=0, **kwargs)


@pytest.fixture
def uninstalled():
    yield
    zipsave.sb3.uninstall()


# -- schedules made by SB3's helper functions -------------------------------------------------
def _schedule_model():
    linear = _quietly(utils.get_linear_fn, 1e-3, 1e-4, 0.5)
    clip = _quietly(utils.get_schedule_fn, 0.3)  # a lambda around constant_fn(0.3)
    return _ppo(learning_rate=linear, clip_range=clip)


def _check_schedules(model):
    assert isinstance(model.learning_rate, utils.LinearSchedule)
    assert (model.learning_rate.start, model.learning_rate.end, model.learning_rate.end_fraction) == (1e-3, 1e-4, 0.5)
    assert isinstance(model.lr_schedule, utils.FloatSchedule)
    assert [model.lr_schedule(p) for p in (1.0, 0.75, 0.0)] == pytest.approx([1e-3, 5.5e-4, 1e-4])
    assert isinstance(model.clip_range, utils.FloatSchedule)
    assert model.clip_range(0.5) == 0.3  # not PPO's default 0.2


@pytest.mark.parametrize("saver", ["sb3", "zipsave"])
def test_closure_schedules_inside_floatschedule_are_rebuilt_by_zipsave_load(tmp_path, saver):
    # SB3 >= 2.7 wraps a closure passed as `learning_rate`/`clip_range` in FloatSchedule; the
    # pickle of that object was refused whole, and clip_range fell back to 0.2 with a warning.
    model = _schedule_model()
    path = tmp_path / "sched.zip"
    model.save(path) if saver == "sb3" else zipsave.save(model, path)
    report = zipsave.LoadReport()
    loaded = zipsave.load(path, cls=PPO, report=report)  # warnings are errors here
    _check_schedules(loaded)
    assert report.skipped == [] and report.notes == []


def test_closure_schedules_are_rebuilt_by_sb3_load_under_install(tmp_path, uninstalled):
    model = _schedule_model()
    model.save(tmp_path / "sched.zip")
    zipsave.sb3.install()
    _check_schedules(PPO.load(tmp_path / "sched.zip"))


def test_dqn_exploration_schedule_from_get_linear_fn_is_rebuilt(tmp_path, uninstalled):
    model = DQN("MlpPolicy", "CartPole-v1", learning_starts=8, buffer_size=64, policy_kwargs={"net_arch": [8]},
                learning_rate=_quietly(utils.get_linear_fn, 1e-3, 0.0, 1.0), seed=0)
    model.exploration_schedule = _quietly(utils.get_linear_fn, 1.0, 0.1, 0.2)
    model.save(tmp_path / "dqn.zip")
    zipsave.sb3.install()
    for loaded in (zipsave.load(tmp_path / "dqn.zip", cls=DQN), DQN.load(tmp_path / "dqn.zip")):
        assert isinstance(loaded.learning_rate, utils.LinearSchedule)
        assert loaded.lr_schedule(0.5) == pytest.approx(5e-4)
        assert isinstance(loaded.exploration_schedule, utils.LinearSchedule)
