"""``model.load_replay_buffer(archive)`` under ``zipsave.sb3.install()``: SB3's door replaces the
model's buffer with one of the saved size, and zipsave built that buffer from the
``buffer_size`` in ``replay_buffer/data`` before it looked at the arrays. A few bytes then
asked SB3 for any buffer: ``buffer_size=10**13`` raised numpy's ``MemoryError`` (146 TiB),
``10**9`` allocated 16 GB of zeros and left the model holding them after the load was refused.
A new buffer is built only for as many rows as the archive's bytes can hold."""

from __future__ import annotations

import json
import pathlib
import re
import sys
import zipfile

import pytest

import zipsave

pytest.importorskip("stable_baselines3")

from stable_baselines3 import DQN  # noqa: E402

import zipsave.sb3  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from adversarial.printed import write_zip  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("buffer")
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, learning_starts=0, device="cpu", seed=0)
    model.learn(40)
    zipsave.save(model, folder / "dqn.zip", include=["replay_buffer"])
    with zipfile.ZipFile(folder / "dqn.zip") as zf:
        members = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    return folder, members


def _with_size(folder: pathlib.Path, members: dict[str, bytes], size: int) -> str:
    state = json.loads(members["replay_buffer/data"])
    state["buffer_size"] = size
    edited = {**members, "replay_buffer/data": json.dumps(state).encode()}
    return write_zip(str(folder / f"size_{size}.zip"), edited, manifest=False)


@pytest.mark.parametrize("size", [10**13, 10**7])
def test_a_buffer_size_the_archive_cannot_hold_builds_nothing(saved, size):
    folder, members = saved
    path = _with_size(folder, members, size)
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=32, device="cpu")
    before = model.replay_buffer
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.ArchiveLimitError, match=re.escape(f"buffer_size={size}")) as caught:
            model.load_replay_buffer(path)
    assert "replay_buffer/data" in str(caught.value) and path in str(caught.value)
    assert model.replay_buffer is before and before.buffer_size == 32  # the model is as it was


def test_a_refused_buffer_of_another_size_leaves_the_model_its_own(saved):
    # within the budget, but its arrays do not fit: the model kept the empty buffer built for it
    folder, members = saved
    path = _with_size(folder, members, 1000)
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=32, device="cpu")
    before = model.replay_buffer
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.ZipsaveError, match=re.escape("expected float32[1000, 1, 4]")):
            model.load_replay_buffer(path)
    assert model.replay_buffer is before


def test_a_saved_buffer_of_another_size_still_loads(saved):
    folder, members = saved
    path = write_zip(str(folder / "as_saved.zip"), members, manifest=False)
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=32, device="cpu")
    with zipsave.sb3.installed():
        model.load_replay_buffer(path)
    assert model.replay_buffer.buffer_size == 64 and model.replay_buffer.pos > 0


def _side_pickle(folder: pathlib.Path, name: str, edit) -> str:
    """A replay buffer pickled by SB3's own ``save_replay_buffer`` (not installed), edited."""
    from stable_baselines3.common.save_util import save_to_pkl

    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, learning_starts=0, device="cpu", seed=0)
    model.learn(40)
    edit(model.replay_buffer)
    path = str(folder / f"{name}.pkl")
    save_to_pkl(path, model.replay_buffer)
    return path


def _pos(buffer) -> None:
    buffer.pos = 10**6


def _rows(buffer) -> None:
    buffer.observations = buffer.observations[:5]


def _obs_shape(buffer) -> None:
    buffer.next_observations = buffer.next_observations[..., :2].copy()


def _full(buffer) -> None:
    buffer.full = "yes"


@pytest.mark.parametrize("edit", [_pos, _rows, _obs_shape, _full], ids=lambda f: f.__name__.strip("_"))
def test_an_inconsistent_pickled_buffer_is_refused(edit, tmp_path):
    # SB3's pickle of a buffer sets its state as it is: pos=10**6 or 5 rows of a 64-row buffer
    # loaded, and the first sample() raised IndexError
    path = _side_pickle(tmp_path, edit.__name__, edit)
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, device="cpu")
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.ZipsaveError, match=re.escape("replay buffer")) as caught:
            model.load_replay_buffer(path)
    assert path in str(caught.value)


def test_a_consistent_pickled_buffer_loads(tmp_path):
    path = _side_pickle(tmp_path, "fine", lambda buffer: None)
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, device="cpu")
    with zipsave.sb3.installed():
        model.load_replay_buffer(path)
    assert model.replay_buffer.pos == 40 and model.replay_buffer.sample(8).observations.shape == (8, 4)


def test_pickled_statistics_of_another_shape_are_refused(tmp_path):
    # VecNormalize.load of SB3's pickle took a mean of 5 numbers for 3 observations; the first
    # step raised ValueError (operands could not be broadcast)
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    vec = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]))
    vec.obs_rms.mean, vec.obs_rms.var = np.zeros(5), np.ones(5)
    path = str(tmp_path / "vec.pkl")
    vec.save(path)  # SB3's own pickle (not installed)
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.ZipsaveError, match=re.escape("`obs_rms.mean` is of shape (5,)")) as caught:
            VecNormalize.load(path, DummyVecEnv([lambda: gym.make("Pendulum-v1")]))
        vec.obs_rms.mean, vec.obs_rms.var = np.zeros(3), np.ones(3)
        vec.save(path)  # through zipsave now, as it is
        assert VecNormalize.load(path, DummyVecEnv([lambda: gym.make("Pendulum-v1")])).obs_rms.mean.shape == (3,)
    assert path in str(caught.value)
