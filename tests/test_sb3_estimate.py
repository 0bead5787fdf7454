"""zipsave.sb3._estimate: an SB3 model's size, estimated from its hyper-parameters before SB3
builds it (issue 35 item 7). The estimate is a lower bound of what SB3 really allocates (so
a real model is never refused for a size it does not have), and the caller's
``Limits.max_model_bytes`` bounds it at every door."""

from __future__ import annotations

import collections
import re

import gymnasium as gym
import numpy as np
import pytest

import zipsave
from zipsave.exceptions import ArchiveLimitError
from zipsave.sb3._estimate import check_model_size, estimate_model

sb3 = pytest.importorskip("stable_baselines3")
from stable_baselines3 import A2C, DQN, PPO, SAC, TD3  # noqa: E402

import zipsave.sb3  # noqa: E402


class _Spaces(gym.Env):
    """An environment with the given spaces; never stepped."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        return self.observation_space.sample(), {}

    def step(self, action: object) -> tuple:
        return self.observation_space.sample(), 0.0, False, False, {}


IMAGE = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
MIXED = gym.spaces.Dict(
    {
        "img": gym.spaces.Box(0, 255, (3, 36, 36), np.uint8),
        "vec": gym.spaces.Box(-1, 1, (5,)),
        "d": gym.spaces.Discrete(3),
    }
)
BOX = gym.spaces.Box(-1, 1, (2,))

MODELS = {
    "ppo_mlp_default": lambda: PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, device="cpu"),
    "ppo_dict_arch": lambda: PPO(
        "MlpPolicy",
        "Pendulum-v1",
        n_steps=64,
        batch_size=64,
        device="cpu",
        policy_kwargs={"net_arch": {"pi": [128, 128], "vf": [256]}},
    ),
    "ppo_cnn": lambda: PPO(
        "CnnPolicy", _Spaces(IMAGE, gym.spaces.Discrete(6)), n_steps=16, batch_size=16, device="cpu"
    ),
    "ppo_multi_input": lambda: PPO("MultiInputPolicy", _Spaces(MIXED, BOX), n_steps=16, batch_size=16, device="cpu"),
    "a2c_separate_extractors": lambda: A2C(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=8,
        device="cpu",
        policy_kwargs={"net_arch": [64, 64], "share_features_extractor": False},
    ),
    "dqn_cnn": lambda: DQN("CnnPolicy", _Spaces(IMAGE, gym.spaces.Discrete(6)), buffer_size=200, device="cpu"),
    "dqn_cnn_optimized": lambda: DQN(
        "CnnPolicy",
        _Spaces(IMAGE, gym.spaces.Discrete(6)),
        buffer_size=200,
        device="cpu",
        optimize_memory_usage=True,
        replay_buffer_kwargs={"handle_timeout_termination": False},
    ),
    "dqn_mlp": lambda: DQN(
        "MlpPolicy", "CartPole-v1", buffer_size=500, device="cpu", policy_kwargs={"net_arch": [256, 256]}
    ),
    "sac_list_arch": lambda: SAC(
        "MlpPolicy", "Pendulum-v1", buffer_size=500, device="cpu", policy_kwargs={"net_arch": [400, 300]}
    ),
    "sac_multi_input": lambda: SAC("MultiInputPolicy", _Spaces(MIXED, BOX), buffer_size=50, device="cpu"),
    "td3_qf_arch": lambda: TD3(
        "MlpPolicy",
        "Pendulum-v1",
        buffer_size=500,
        device="cpu",
        policy_kwargs={"net_arch": {"pi": [64], "qf": [400, 300]}},
    ),
}


def _nbytes(value: object) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    return sum(_nbytes(v) for v in value.values()) if isinstance(value, dict) else 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_estimate_is_a_lower_bound_of_what_sb3_builds(name):
    model = MODELS[name]()
    est = estimate_model(vars(model))
    params = sum(p.numel() for p in model.policy.parameters()) * 4
    buffer = getattr(model, "replay_buffer", None) or model.rollout_buffer
    buffer_bytes = sum(_nbytes(v) for v in vars(buffer).values())
    key = "buffer_size" if "buffer_size" in vars(model) else "n_steps"
    assert 0 < est.of("policy_kwargs") <= params
    assert est.of(key) <= buffer_bytes  # a lower bound: never refuses a model SB3 can build
    if _keeps_observation_dtype(buffer, model.observation_space):  # older SB3 widens them to float32
        assert 0.9 * buffer_bytes <= est.of(key)  # the buffer is counted nearly exactly
    batch = est.of("batch_size")  # what an off-policy model samples at each train step
    assert est.total == est.of("policy_kwargs") + est.of(key) + batch
    assert (batch > 0) == (key == "buffer_size")


def _keeps_observation_dtype(buffer, space) -> bool:
    """Whether the buffer stores observations at the space's dtype (the estimate counts them so;
    SB3 2.7, the lowest tested, stores a rollout buffer's observations as float32)."""
    observations = buffer.observations
    if isinstance(observations, dict):
        return all(observations[k].dtype == space[k].dtype for k in observations)
    return observations.dtype == space.dtype


def test_an_explicit_net_arch_is_counted_exactly():
    model = MODELS["ppo_dict_arch"]()
    assert estimate_model(vars(model)).of("policy_kwargs") == sum(p.numel() for p in model.policy.parameters()) * 4 - 4


@pytest.mark.parametrize(
    ("changes", "key", "words"),
    [
        ({"n_steps": 10**9}, "n_steps", "a rollout buffer of 1000000000 steps x 1 envs, about"),
        ({"policy_kwargs": {"net_arch": [10**5, 10**5]}}, "policy_kwargs", "a policy of about 10000800002 parameters"),
        (
            {"policy_kwargs": {"net_arch": {"pi": [10**5, 10**5], "vf": [8]}}},
            "policy_kwargs",
            "a policy of about 10000800051 ",
        ),
        (
            {"policy_kwargs": {"net_arch": [8, {"pi": [10**5, 10**5]}]}},
            "policy_kwargs",
            "a policy of about 10001200042 ",
        ),
        # sizes SB3 and torch take as integers (numpy's, a 1-d array, a deque) that the
        # estimate counted as nothing: PPO went on to allocate 14 GB for them
        ({"n_steps": np.int64(10**9)}, "n_steps", "a rollout buffer of 1000000000 steps x 1 envs, about"),
        ({"buffer_size": np.int32(10**9)}, "buffer_size", "a replay buffer of 1000000000 transitions"),
        (
            {"policy_kwargs": {"net_arch": [np.int64(10**5), np.uint32(10**5)]}},
            "policy_kwargs",
            "a policy of about 10000800002 parameters",
        ),
        ({"policy_kwargs": {"net_arch": np.array([10**5, 10**5])}}, "policy_kwargs", "a policy of about 10000800002 "),
        (
            {"policy_kwargs": {"net_arch": collections.deque([10**5, 10**5])}},
            "policy_kwargs",
            "a policy of about 10000800002 ",
        ),
        (
            {"policy_kwargs": {"net_arch": {"pi": (np.int16(8),), "vf": np.array([10**5, 10**5])}}},
            "policy_kwargs",
            "a policy of about 10000700059 ",
        ),
    ],
)
def test_a_caller_set_limit_bounds_every_door(tmp_path, changes, key, words):
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu", policy_kwargs={"net_arch": [8]})
    params = {**vars(model), **changes}
    limits = zipsave.Limits(max_model_bytes=1 << 30)
    with pytest.raises(ArchiveLimitError, match=re.escape(words)) as info:
        check_model_size(PPO, params, str(tmp_path / "x.zip"), limits=limits)
    assert info.value.key == key and info.value.member == "data"
    assert "more than `Limits.max_model_bytes` (1073741824)" in str(info.value)
    assert "`limits=zipsave.Limits(max_model_bytes=...)`" in str(info.value)


def test_max_model_bytes_refuses_and_admits_a_real_model(tmp_path):
    path = tmp_path / "ppo.zip"
    zipsave.save(PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, device="cpu"), path)
    tight = zipsave.Limits(max_model_bytes=1000)
    message = re.escape("`n_steps` asks for a rollout buffer of 64 steps x 1 envs, about ")
    with pytest.raises(ArchiveLimitError, match=message):
        zipsave.load(path, cls=PPO, device="cpu", limits=tight)
    with zipsave.sb3.installed(limits=tight), pytest.raises(ArchiveLimitError, match=message):
        PPO.load(path, device="cpu")
    with zipsave.sb3.installed(limits=zipsave.Limits(max_model_bytes=1 << 30)):
        assert PPO.load(path, device="cpu").n_steps == 64
    assert zipsave.load(path, cls=PPO, device="cpu").n_steps == 64  # the defaults admit it


def test_policy_load_is_estimated_too(tmp_path):
    from stable_baselines3.common.policies import ActorCriticPolicy

    path = tmp_path / "policy.zip"
    with zipsave.sb3.installed():
        PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu").policy.save(path)
    with (
        zipsave.sb3.installed(limits=zipsave.Limits(max_model_bytes=1000)),
        pytest.raises(ArchiveLimitError, match=re.escape("building this ActorCriticPolicy would allocate about")),
    ):
        ActorCriticPolicy.load(path, device="cpu")


def test_the_default_bound_follows_the_archive_and_the_address_space(tmp_path):
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
    archive = tmp_path / "small.zip"
    archive.write_bytes(b"x" * 1000)
    big = {**vars(model), "policy_kwargs": {"net_arch": [5000, 5000]}}  # 25M parameters: 100 MB
    with pytest.raises(
        ArchiveLimitError,
        match=re.escape("more than the 67124864 bytes of parameters an archive of 1000 bytes may build"),
    ):
        check_model_size(PPO, big, str(archive))
    check_model_size(PPO, big, str(archive), limits=zipsave.Limits(alloc_ratio=1e6))  # raised: admitted
    check_model_size(PPO, big, "https://example.com/model.zip")  # size unknown: only the machine bounds it


def test_install_checks_its_limits():
    with pytest.raises(TypeError, match=re.escape("`limits` must be a zipsave.Limits or None, got dict.")):
        zipsave.sb3.install(limits={"max_model_bytes": 1})


def test_layers_are_bounded_like_parameters(tmp_path):
    # n_critics=3e6 of an 8-wide net: 1.4 GB of parameters but 9 million modules (3.6 KB and
    # 0.1 ms each), which SAC took minutes to build from 20 bytes of data
    model = SAC("MlpPolicy", "Pendulum-v1", buffer_size=50, device="cpu", policy_kwargs={"net_arch": [8, 8]})
    path = tmp_path / "sac.zip"
    zipsave.save(model, path)
    params = {**vars(model), "policy_kwargs": {"net_arch": [8, 8], "n_critics": np.int64(3_000_000)}}
    with pytest.raises(ArchiveLimitError, match=re.escape("asks for a policy of 9000003 layers, about 18432006144")):
        check_model_size(SAC, params, str(path))
    with pytest.raises(ArchiveLimitError, match=re.escape("a policy of 9000003 layers")):
        check_model_size(SAC, params, str(path), limits=zipsave.Limits(max_model_bytes=1 << 32))
    assert estimate_model(vars(model)).layers == 3 + 2 * 3  # the actor's, and two critics of three layers
    check_model_size(SAC, vars(model), str(path))  # a real one is admitted


def test_a_long_layer_list_is_bounded(tmp_path):
    # 200 000 layers of width 1 (600 KB of JSON): TD3 built 600 000 modules for more than 5 minutes
    path = tmp_path / "x.zip"
    path.write_bytes(b"x" * 625_000)
    model = TD3("MlpPolicy", "Pendulum-v1", buffer_size=50, device="cpu", policy_kwargs={"net_arch": [8]})
    params = {**vars(model), "policy_kwargs": {"net_arch": [1] * 200_000}}
    with pytest.raises(ArchiveLimitError, match=re.escape("asks for a policy of 600003 layers")):
        check_model_size(TD3, params, str(path))
    ranged = {**vars(model), "policy_kwargs": {"net_arch": range(1, 10**9)}}  # only grows: its first layers tell
    with pytest.raises(ArchiveLimitError, match=re.escape("a policy of about")):
        check_model_size(TD3, ranged, str(path))
