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
    assert "Observation spaces do not match" in str(sb3_error.value)
    message = str(caught.value)
    assert "the environment given as `env=` has observation_space=Box(" in message
    assert "was trained with observation_space=Box(" in message and "3.4028235e+38" in message
    assert "damaged" not in str(caught.value)


# -- every attribute, as the Zoo configures the model ------------------------------------------
_NOT_COMPARED = {"env", "_logger", "_custom_logger", "_vec_normalize_env", "replay_buffer", "rollout_buffer"}
_MODULES = {"policy", "actor", "critic", "critic_target", "actor_target", "q_net", "q_net_target"}
_PROGRESS = (1.0, 0.7, 0.5, 0.1, 0.0)


def _differences(mine, theirs, path, out):
    """Where two attribute values differ: schedules by their values along the run, modules and
    optimizers by their state, spaces, arrays and tensors by value and dtype."""
    if isinstance(theirs, type) or type(mine) is not type(theirs):
        if mine is not theirs:
            out.append(f"{path}: {mine!r} is not {theirs!r}")
    elif isinstance(theirs, (th.nn.Module, th.optim.Optimizer)):
        _differences(mine.state_dict(), theirs.state_dict(), path, out)
    elif isinstance(theirs, th.Tensor):
        if theirs.dtype != mine.dtype or not th.equal(mine, theirs):
            out.append(f"{path}: tensors differ")
    elif isinstance(theirs, np.ndarray):
        if theirs.dtype != mine.dtype or not np.array_equal(mine, theirs):
            out.append(f"{path}: arrays differ")
    elif isinstance(theirs, dict):
        if set(mine) != set(theirs):
            out.append(f"{path}: keys {sorted(map(str, mine))} != {sorted(map(str, theirs))}")
        for key in set(mine) & set(theirs):
            _differences(mine[key], theirs[key], f"{path}[{key!r}]", out)
    elif isinstance(theirs, (list, tuple)):
        if len(mine) != len(theirs):
            out.append(f"{path}: lengths differ")
        for index, (a, b) in enumerate(zip(mine, theirs)):
            _differences(a, b, f"{path}[{index}]", out)
    elif callable(theirs) and not hasattr(theirs, "reset"):  # a schedule (not action noise)
        if [mine(p) for p in _PROGRESS] != [theirs(p) for p in _PROGRESS]:
            out.append(f"{path}: schedules differ")
    elif hasattr(theirs, "__dict__") and not isinstance(theirs, gym_spaces().Space):
        _differences(vars(mine), vars(theirs), f"{path}.__dict__", out)
    elif mine != theirs and not (mine != mine and theirs != theirs):  # NaN is NaN
        out.append(f"{path}: {mine!r} != {theirs!r}")
    return out


def gym_spaces():
    import gymnasium

    return gymnasium.spaces


def _model_differences(mine, theirs):
    out = []
    for key in sorted(set(vars(mine)) | set(vars(theirs))):
        if key in _NOT_COMPARED:
            continue
        if key not in vars(mine) or key not in vars(theirs):
            out.append(f"{key}: only on one side")
        else:
            _differences(vars(mine)[key], vars(theirs)[key], key, out)
    for name in theirs._get_torch_save_params()[0]:  # the optimizers
        a, b = mine, theirs
        for part in name.split("."):
            a, b = getattr(a, part), getattr(b, part)
        _differences(a, b, name, out)
    return out


def _zoo_model(name):
    """A model as the Zoo builds it from its hyperparameter files: `lin_` strings become
    SimpleLinearSchedule (rl-zoo3 >= 2.7; before, the `linear_schedule` closure, which SB3
    pickles by value), numbers ConstantSchedule (SB3 >= 2.7)."""
    zoo = pytest.importorskip("rl_zoo3.utils")
    import stable_baselines3
    from stable_baselines3.common.utils import ConstantSchedule

    lin, const = getattr(zoo, "SimpleLinearSchedule", zoo.linear_schedule), ConstantSchedule
    buffer = {"buffer_size": 64, "learning_starts": 8, "batch_size": 8}
    env, kwargs = {
        "PPO": ("CartPole-v1", {
            "n_steps": 16, "batch_size": 16, "n_epochs": 1, "learning_rate": lin(1e-3), "clip_range": lin(0.2),
            "clip_range_vf": const(0.3), "max_grad_norm": float("inf"),
            "policy_kwargs": {"net_arch": [8], "activation_fn": th.nn.ReLU, "ortho_init": False},
        }),
        "SAC": ("Pendulum-v1", {
            **buffer, "learning_rate": lin(7.3e-4), "ent_coef": "auto_0.1", "target_entropy": -0.5, "use_sde": True,
            "policy_kwargs": {"net_arch": [8], "log_std_init": -3, "use_expln": True},
        }),
        "DQN": ("CartPole-v1", {
            **buffer, "learning_rate": const(2.3e-3), "exploration_fraction": 0.16, "exploration_final_eps": 0.04,
            "train_freq": (4, "step"), "target_update_interval": 4, "policy_kwargs": {"net_arch": [8]},
        }),
    }[name]  # fmt: skip
    return getattr(stable_baselines3, name)("MlpPolicy", env, seed=0, **kwargs)


@pytest.mark.parametrize("name", ["PPO", "SAC", "DQN"])
def test_zoo_configured_models_are_the_same_through_every_door(tmp_path, name):
    model = _zoo_model(name)
    model.learn(24)
    model.save(tmp_path / "zoo.zip")
    reference, *doors = _through_every_door(tmp_path / "zoo.zip", type(model))
    for loaded in doors:
        assert _model_differences(loaded, reference) == []
    # and zipsave's archive read by SB3 gives SB3's model again
    zipsave.save(reference, tmp_path / "again.zip")
    assert _model_differences(type(model).load(tmp_path / "again.zip", device="cpu"), reference) == []
