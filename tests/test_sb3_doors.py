"""SB3's own doors under ``zipsave.sb3.install()`` read every part of a zipsave model archive:
``Algo.load`` restores the replay buffer and ``VecNormalize``, ``model.load_replay_buffer`` and
``VecNormalize.load`` read the archive's folders, and errors and warnings name what is wrong."""

from __future__ import annotations

import base64
import json
import pickle
import re
import types
import warnings
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch

import zipsave

pytest.importorskip("stable_baselines3")  # the `test` extra installs it

import zipsave.sb3  # noqa: E402
from stable_baselines3 import PPO, SAC  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize  # noqa: E402


def venv():
    return DummyVecEnv([lambda: gym.make("Pendulum-v1")])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny SAC trained in a VecNormalize, saved with both extras, once as a model archive and
    once as a checkpoint of a manager."""
    folder = tmp_path_factory.mktemp("doors")
    env = VecNormalize(venv())
    sac = SAC("MlpPolicy", env, buffer_size=200, learning_starts=16, batch_size=16, seed=0, device="cpu",
              policy_kwargs={"net_arch": [8]})
    sac.learn(48)
    path = folder / "sac.zip"
    zipsave.save(sac, path, include=["replay_buffer", "vec_normalize"])
    with zipsave.CheckpointManager(folder / "run", background=False) as manager:
        checkpoint = manager.save(48, sac, include=["replay_buffer", "vec_normalize"])
    return sac, path, checkpoint.path


def same_buffer(loaded, saved):
    assert (loaded.pos, loaded.full) == (saved.pos, saved.full)
    for name in ("observations", "actions", "rewards", "dones", "timeouts", "next_observations"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(saved, name))


def same_statistics(loaded, saved):
    assert isinstance(loaded, VecNormalize)
    np.testing.assert_array_equal(loaded.obs_rms.mean, saved.obs_rms.mean)
    np.testing.assert_array_equal(loaded.obs_rms.var, saved.obs_rms.var)
    assert loaded.obs_rms.count == saved.obs_rms.count and loaded.ret_rms.count == saved.ret_rms.count
    assert (loaded.clip_obs, loaded.gamma, loaded.norm_reward) == (saved.clip_obs, saved.gamma, saved.norm_reward)


@pytest.mark.parametrize("which", ["model", "checkpoint"])
def test_algorithm_load_restores_both_extras(installed, trained, which):
    sac, model_path, checkpoint_path = trained
    model = SAC.load(model_path if which == "model" else checkpoint_path, env=venv(), device="cpu")
    same_buffer(model.replay_buffer, sac.replay_buffer)
    same_statistics(model.get_vec_normalize_env(), sac.get_vec_normalize_env())
    model.learn(8, reset_num_timesteps=False)  # training goes on from the restored buffer
    assert model.replay_buffer.pos == (sac.replay_buffer.pos + 8) % 200


def test_algorithm_load_without_env_names_the_vec_normalize_door(installed, trained):
    sac, path, _ = trained
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape(f"`env = VecNormalize.load({str(path)!r}, venv)`")):
        model = SAC.load(path, device="cpu")
    same_buffer(model.replay_buffer, sac.replay_buffer)  # the buffer needs no env


@pytest.mark.parametrize("which", ["model", "checkpoint"])
def test_load_replay_buffer_reads_the_archive_folder(installed, trained, which):
    sac, model_path, checkpoint_path = trained
    fresh = SAC("MlpPolicy", "Pendulum-v1", buffer_size=1000, seed=1, device="cpu", policy_kwargs={"net_arch": [8]})
    fresh.load_replay_buffer(model_path if which == "model" else checkpoint_path)
    assert fresh.replay_buffer.buffer_size == 200  # SB3's door replaces the buffer with the saved one
    same_buffer(fresh.replay_buffer, sac.replay_buffer)
    assert fresh.replay_buffer.device == fresh.device


def test_load_replay_buffer_of_its_own_file_still_works(installed, trained, tmp_path):
    sac, _, _ = trained
    sac.save_replay_buffer(tmp_path / "buffer")
    fresh = SAC("MlpPolicy", "Pendulum-v1", buffer_size=200, device="cpu", policy_kwargs={"net_arch": [8]})
    fresh.load_replay_buffer(tmp_path / "buffer")
    same_buffer(fresh.replay_buffer, sac.replay_buffer)


@pytest.mark.parametrize("which", ["model", "checkpoint"])
def test_vec_normalize_load_reads_the_archive_folder(installed, trained, which):
    sac, model_path, checkpoint_path = trained
    inner = venv()
    loaded = VecNormalize.load(model_path if which == "model" else checkpoint_path, inner)
    assert loaded.venv is inner
    same_statistics(loaded, sac.get_vec_normalize_env())


def test_a_plain_torch_file_through_algorithm_load(installed, tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "plain.pth")
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("has no `data` member, so it holds no model")):
        PPO.load(tmp_path / "plain.pth")


def test_custom_objects_as_a_list(installed, trained):
    _, path, _ = trained
    with pytest.raises(TypeError, match=re.escape("found a list: ['learning_rate']. Pass e.g. "
                                                  "custom_objects={'learning_rate': ...}")):
        SAC.load(path, custom_objects=["learning_rate"])


def test_a_bad_value_is_blamed_on_the_caller(installed, trained):
    _, path, _ = trained
    expected = re.escape("custom_objects['learning_rate'] = 'fast' (a str; the archive holds a number (0.0003))")
    with pytest.raises(zipsave.DecodeError, match=expected) as sb3_door:
        SAC.load(path, env=venv(), custom_objects={"learning_rate": "fast"})
    assert sb3_door.value.key == "custom_objects['learning_rate']"
    with pytest.raises(zipsave.DecodeError, match=expected):
        zipsave.load(path, cls=SAC, env=venv(), custom_objects={"learning_rate": "fast"})


def test_unknown_and_unmatched_keys_warn_once_each(installed, trained, tmp_path):
    _, path, _ = trained
    edited = tmp_path / "edited.zip"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(edited, "w") as out:
        for name in src.namelist():
            payload = src.read(name)
            if name == "data":
                data = json.loads(payload)
                data["gmma"] = 0.5
                payload = json.dumps(data).encode()
            out.writestr(name, payload)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SAC.load(edited, env=venv(), custom_objects={"lerning_rate": 0.1})
    texts = [str(w.message) for w in caught]
    unknown = [t for t in texts if "`data` holds `gmma`, which SAC neither takes nor sets (did you mean `gamma`?)" in t]
    unmatched = [t for t in texts if "custom_objects['lerning_rate'] matches no key of the archive's `data`" in t]
    assert len(unknown) == 1 and len(unmatched) == 1, texts


def test_an_unpicklable_value_under_allow_pickle_names_custom_objects(trained, tmp_path):
    _, path, _ = trained
    broken = pickle.dumps(types.SimpleNamespace).replace(b"SimpleNamespace", b"SimpleNamespacf")
    edited = tmp_path / "odd.zip"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(edited, "w") as out:
        for name in src.namelist():
            payload = src.read(name)
            if name == "data":
                data = json.loads(payload)
                data["odd"] = {":type:": "<class 'type'>", ":serialized:": base64.b64encode(broken).decode()}
                payload = json.dumps(data).encode()
            out.writestr(name, payload)
    with zipsave.sb3.installed(allow_pickle=True), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # the edited `data` is reported too
        SAC.load(edited, env=venv(), device="cpu")
    skipped = [str(w.message) for w in caught if isinstance(w.message, zipsave.SkippedEntryWarning)]
    assert len(skipped) == 1 and "skipped key `odd`" in skipped[0], skipped
    assert "cannot unpickle the value" in skipped[0]
    assert "Consider using `custom_objects={'odd': ...}` to replace it." in skipped[0]


def test_a_buffer_file_through_algorithm_load_names_its_door(installed, trained, tmp_path):
    sac, _, _ = trained
    sac.save_replay_buffer(tmp_path / "buffer")
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(
            "holds a replay buffer or VecNormalize saved on its own")) as raised:
        SAC.load(tmp_path / "buffer.pkl")
    assert "model.load_replay_buffer(path)" in str(raised.value)


def test_a_bad_keyword_value_is_blamed_on_the_keyword(installed, trained):
    _, path, _ = trained
    with pytest.raises(zipsave.DecodeError, match=re.escape("learning_rate='fast' (a str; the archive holds a number")):
        SAC.load(path, env=venv(), learning_rate="fast")


@pytest.mark.parametrize("truncate", [True, False])
def test_load_replay_buffer_of_a_her_archive_follows_truncate_last_traj(installed, tmp_path, truncate):
    from stable_baselines3 import DQN, HerReplayBuffer
    from stable_baselines3.common.envs import BitFlippingEnv

    def her_model(**kwargs):
        return DQN("MultiInputPolicy", BitFlippingEnv(n_bits=5), buffer_size=200, replay_buffer_class=HerReplayBuffer,
                   policy_kwargs={"net_arch": [8]}, seed=0, device="cpu", **kwargs)

    her = her_model(learning_starts=16)
    her.learn(50)  # episodes of 5 steps, collected 4 at a time: one is under way
    saved = her.replay_buffer
    assert (saved._current_ep_start != saved.pos).any()
    zipsave.save(her, tmp_path / "her.zip", include=["replay_buffer"])
    fresh = her_model()
    fresh.load_replay_buffer(tmp_path / "her.zip", truncate_last_traj=truncate)
    buffer = fresh.replay_buffer
    assert buffer.pos == saved.pos and (buffer.ep_start == saved.ep_start).all() and buffer.env is fresh.env
    ended = (buffer._current_ep_start == buffer.pos).all()
    assert ended == truncate  # as SB3's own load_replay_buffer does
