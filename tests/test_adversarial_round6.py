"""Round six of the adversarial suite: values a default load hands back that fail on first use
(SB3's action noises), and messages about huge integers a pickle holds (a replay buffer's
``pos`` of 5 000 digits was refused with Python's limit on integer text, naming nothing)."""

from __future__ import annotations

import pathlib
import re
import sys

import pytest

import zipsave

pytest.importorskip("stable_baselines3")

from stable_baselines3 import DQN  # noqa: E402

import zipsave.sb3  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

HUGE = 10**5000  # 16 610 bits: within zipsave's integer bound, past Python's 4 300 digits of text


@pytest.fixture(scope="module")
def buffer_model():
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, learning_starts=0, device="cpu", seed=0)
    model.learn(40)
    return model


def _side_pickle(folder: pathlib.Path, buffer, **changes) -> str:
    from stable_baselines3.common.save_util import save_to_pkl

    old = {name: getattr(buffer, name) for name in changes}
    for name, value in changes.items():
        setattr(buffer, name, value)
    path = str(folder / "buffer.pkl")
    try:
        save_to_pkl(path, buffer)  # SB3's own pickle (not installed)
    finally:
        for name, value in old.items():
            setattr(buffer, name, value)
    return path


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("pos", HUGE, "0 <= pos < 64"),
        ("pos", -HUGE, "0 <= pos < 64"),
        ("buffer_size", -HUGE, "an integer of at least 1"),
        ("n_envs", -HUGE, "an integer of at least 1"),
        ("full", HUGE, "a bool"),
    ],
    ids=["pos", "negative-pos", "buffer_size", "n_envs", "full"],
)
def test_a_huge_integer_in_a_pickled_buffer_is_named(tmp_path, buffer_model, name, value, expected):
    # `pos` of 5 000 digits was refused with "Exceeds the limit (4300 digits) for integer string
    # conversion": the message formatted the value with repr(), which raised inside the check
    path = _side_pickle(tmp_path, buffer_model.replay_buffer, **{name: value})
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, device="cpu")
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.DecodeError) as caught:
            model.load_replay_buffer(path)
    message = str(caught.value)
    assert caught.value.key == name and f"`{name}`" in message and expected in message
    assert "integer of 16610 bits" in message and "4300" not in message
    assert path in message


def test_a_huge_buffer_size_is_shown_by_its_size(tmp_path, buffer_model):
    path = _side_pickle(tmp_path, buffer_model.replay_buffer, buffer_size=HUGE)
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, device="cpu")
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.DecodeError) as caught:
            model.load_replay_buffer(path)
    expected = "where SB3 keeps (buffer_size, n_envs) = (an integer of 16610 bits, 1) rows"
    assert caught.value.key == "observations" and expected in str(caught.value)


def test_a_huge_count_in_pickled_statistics_is_named(tmp_path):
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    vec = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]))
    vec.obs_rms.count = HUGE
    path = str(tmp_path / "vec.pkl")
    vec.save(path)  # SB3's own pickle (not installed)
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.DecodeError, match=re.escape("`obs_rms.count` is an integer of 16610 bits")):
            VecNormalize.load(path, DummyVecEnv([lambda: gym.make("Pendulum-v1")]))
