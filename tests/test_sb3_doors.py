"""SB3's own doors under ``zipsave.sb3.install()`` read every part of a zipsave model archive:
``Algo.load`` restores the replay buffer and ``VecNormalize``, ``model.load_replay_buffer`` and
``VecNormalize.load`` read the archive's folders, and errors and warnings name what is wrong."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import pickle
import re
import struct
import types
import warnings
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch

import zipsave

pytest.importorskip("stable_baselines3")  # the `test` extra installs it

import stable_baselines3  # noqa: E402
from stable_baselines3 import PPO, SAC  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize  # noqa: E402

import zipsave.sb3  # noqa: E402


def venv():
    return DummyVecEnv([lambda: gym.make("Pendulum-v1")])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny SAC trained in a VecNormalize, saved with both extras, once as a model archive and
    once as a checkpoint of a manager."""
    folder = tmp_path_factory.mktemp("doors")
    env = VecNormalize(venv())
    sac = SAC(
        "MlpPolicy",
        env,
        buffer_size=200,
        learning_starts=16,
        batch_size=16,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )
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


def test_a_model_archive_without_the_extra_names_the_folder_and_the_fix(installed, trained, tmp_path):
    # a model saved without include=[...]: SB3's doors said "holds no `_zipsave_object_class`"
    sac, _, _ = trained
    bare = tmp_path / "bare.zip"
    sac.save(bare)
    fresh = SAC("MlpPolicy", "Pendulum-v1", buffer_size=200, device="cpu", policy_kwargs={"net_arch": [8]})
    with pytest.raises(
        zipsave.ArchiveFormatError,
        match=re.escape(
            f"archive `{bare}`, member `data`: holds a model (its `data` names a `policy_class`) without a "
            "`replay_buffer/` folder: it is not a replay buffer file. Pass a file written by "
            "`model.save_replay_buffer(path)` or `model.save(path, include=['replay_buffer'])`"
        ),
    ):
        fresh.load_replay_buffer(bare)
    with pytest.raises(
        zipsave.ArchiveFormatError,
        match=re.escape("without a `vec_normalize/` folder: it is not a VecNormalize file. Pass a file written by "),
    ):
        VecNormalize.load(bare, venv())
    not_a_buffer = tmp_path / "state.zip"
    zipsave.save({"step": 3}, not_a_buffer)
    with pytest.raises(
        zipsave.ArchiveFormatError,
        match=re.escape(
            "has no `_zipsave_object_class` in its `data` and no `replay_buffer/` folder: it is not a replay"
        ),
    ):
        fresh.load_replay_buffer(not_a_buffer)


class ReadLog(io.BytesIO):
    """An archive as a file object that records where each read began."""

    def __init__(self, payload):
        super().__init__(payload)
        self.starts = []

    def read(self, n=-1):
        self.starts.append(self.tell())
        return super().read(n)

    def readinto(self, buffer):
        self.starts.append(self.tell())
        return super().readinto(buffer)


@pytest.mark.parametrize("which", ["replay buffer", "VecNormalize"])
def test_a_buffer_or_statistics_file_has_its_data_read_once(installed, trained, tmp_path, which):
    # the door's check that the file is no model archive opened it with `zipsave.inspect`, then
    # `load_archive` opened it again: `data` was read and parsed twice (a file object, a download)
    sac, _, _ = trained
    path = tmp_path / "file.zip"
    if which == "replay buffer":
        sac.save_replay_buffer(path)
    else:
        sac.get_vec_normalize_env().save(path)
    payload = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        at = archive.getinfo("data").header_offset
    name_length, extra_length = struct.unpack("<HH", payload[at + 26 : at + 30])
    log = ReadLog(payload)
    if which == "replay buffer":
        same_buffer(stable_baselines3.common.save_util.load_from_pkl(log), sac.replay_buffer)
    else:
        same_statistics(VecNormalize.load(log, venv()), sac.get_vec_normalize_env())
    assert log.starts.count(at + 30 + name_length + extra_length) == 1  # where `data`'s bytes begin


class EndLog(io.BytesIO):
    """An archive as a file object that counts the seeks to its end (where a zip's directory is)."""

    def __init__(self, payload):
        super().__init__(payload)
        self.ends = 0

    def seek(self, offset, whence=0):
        self.ends += whence == 2
        return super().seek(offset, whence)


def save_side_file(sac, door, path):
    """The file ``door`` reads besides a model archive: a buffer or ``VecNormalize`` file."""
    if door == "load_replay_buffer":
        sac.save_replay_buffer(path)
    else:
        sac.get_vec_normalize_env().save(path)


def through_door(sac, door, given):
    """``door`` on ``given``, and its result is ``sac``'s buffer or statistics."""
    if door == "load_replay_buffer":
        fresh = SAC("MlpPolicy", "Pendulum-v1", buffer_size=200, device="cpu", policy_kwargs={"net_arch": [8]})
        fresh.load_replay_buffer(given)
        same_buffer(fresh.replay_buffer, sac.replay_buffer)
    else:
        same_statistics(VecNormalize.load(given, venv()), sac.get_vec_normalize_env())


@pytest.mark.parametrize("door", ["load_replay_buffer", "VecNormalize.load"])
@pytest.mark.parametrize("which", ["model archive", "file"])
def test_a_door_reads_the_zip_directory_once(installed, trained, tmp_path, monkeypatch, door, which):
    # the door peeked at the directory to decide between the archive's folder and a file SB3's
    # door reads, then the read parsed it again
    from zipsave._archive._reader import ArchiveReader

    sac, model_path, _ = trained
    path = model_path if which == "model archive" else tmp_path / "file.zip"
    if which == "file":
        save_side_file(sac, door, path)
    parses = []
    init = ArchiveReader.__init__
    monkeypatch.setattr(ArchiveReader, "__init__", lambda self, *a, **k: parses.append(1) or init(self, *a, **k))
    for given in (path, EndLog(path.read_bytes())):
        parses.clear()
        through_door(sac, door, given)
        assert len(parses) == 1
    assert given.ends <= 7  # zipfile's check that it is a zip (2), then the one parse (5); 11 and 14 before
    assert given.tell() == 0  # left where it was found


@pytest.mark.parametrize("door", ["load_replay_buffer", "VecNormalize.load"])
def test_the_doors_read_the_urls_zipsave_load_reads(installed, trained, tmp_path, door):
    # a buffer file at a URL got SB3's `.pkl` suffix rule and was opened as a local pickle
    fsspec = pytest.importorskip("fsspec")
    sac, model_path, _ = trained
    save_side_file(sac, door, tmp_path / "file.pkl")
    fs, folder = fsspec.filesystem("memory"), f"/zipsave-doors-{tmp_path.name}"
    fs.pipe(f"{folder}/model.zip", model_path.read_bytes())
    fs.pipe(f"{folder}/file.pkl", (tmp_path / "file.pkl").read_bytes())
    urls = [f"memory://{folder}/model", f"memory://{folder}/file.pkl", f"file://{tmp_path}/file.pkl"]
    try:
        for url in urls:
            through_door(sac, door, url)
        missing = f"memory://{folder}/file"  # a URL gets zipsave.load's suffix rule, not SB3's `.pkl`
        with pytest.raises(zipsave.ZipsaveError) as error:
            zipsave.load(missing)
        with pytest.raises(zipsave.ZipsaveError, match=re.escape(str(error.value))):
            through_door(sac, door, missing)
    finally:
        fs.rm(folder, recursive=True)


def test_a_plain_torch_file_through_algorithm_load(installed, tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "plain.pth")
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("has no `data` member, so it holds no model")):
        PPO.load(tmp_path / "plain.pth")


def test_custom_objects_as_a_list(installed, trained):
    # SB3's json_to_data raises a ValueError for custom_objects that is not a dict; under
    # install() it was a TypeError, which `except ValueError` written for SB3 let through
    from stable_baselines3.common import save_util

    _, path, _ = trained
    with pytest.raises(ValueError, match="custom_objects argument must be a dict or None"):
        save_util.json_to_data("{}", custom_objects=["learning_rate"])  # SB3's own, never replaced
    hint = "found a list: ['learning_rate']. Pass e.g. custom_objects={'learning_rate': ...}"
    with pytest.raises(ValueError, match=re.escape(hint)):
        SAC.load(path, custom_objects=["learning_rate"])
    with pytest.raises(ValueError, match=re.escape(hint)):
        save_util.load_from_zip_file(path, custom_objects=["learning_rate"])


def test_a_bad_value_is_blamed_on_the_caller(installed, trained):
    _, path, _ = trained
    expected = re.escape("custom_objects['learning_rate'] = 'fast' (a str; the archive holds a number (0.0003))")
    with pytest.raises(zipsave.DecodeError, match=expected) as sb3_door:
        SAC.load(path, env=venv(), custom_objects={"learning_rate": "fast"})
    assert sb3_door.value.key == "custom_objects['learning_rate']"
    with pytest.raises(zipsave.DecodeError, match=expected):
        zipsave.load(path, cls=SAC, env=venv(), custom_objects={"learning_rate": "fast"})


def test_a_bad_value_names_the_kind_of_object_the_archive_holds(trained):
    # it said "the archive holds a object", for a schedule, a TrainFreq or an action noise alike
    _, path, _ = trained
    expected = "(a str; the archive holds a `stable_baselines3.common.type_aliases.TrainFreq`)"
    with pytest.raises(zipsave.DecodeError, match=re.escape(expected)):
        zipsave.load(path, cls=SAC, env=venv(), custom_objects={"train_freq": "fast"})


def test_an_app_state_archive_is_named_as_such_by_an_sb3_load(installed, tmp_path):
    # it asked "is this an SB3 model archive?" and suggested custom_objects for the three keys
    zipsave.save({"model": torch.nn.Linear(2, 2), "step": 3}, tmp_path / "state.zip")
    expected = "holds an app state saved by `zipsave.save` (no SB3 model): its `data` has no"
    for load in (lambda: zipsave.load(tmp_path / "state.zip", cls=PPO), lambda: PPO.load(tmp_path / "state.zip")):
        with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(expected)) as caught:
            load()
        assert "`zipsave.load(path)`" in str(caught.value) and "`zipsave.restore(app_state, path)`" in str(caught.value)


def test_a_policy_file_is_named_with_the_door_that_reads_it(trained, tmp_path):
    # the hint was `torch.load(path, weights_only=True)`, which refuses SB3's policy.save files
    # (their pickle names the policy's spaces and classes)
    sac, _, _ = trained
    sac.policy.save(tmp_path / "policy.pth")
    for load in (lambda: zipsave.load(tmp_path / "policy.pth", cls=SAC), lambda: zipsave.load(tmp_path / "policy.pth")):
        with pytest.raises(
            zipsave.ArchiveFormatError, match=re.escape("a policy saved by SB3's `policy.save`")
        ) as caught:
            load()
        assert "weights_only=True" not in str(caught.value)
        assert "`zipsave.sb3.install()`" in str(caught.value)


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


def test_many_near_keys_are_named_up_to_a_bound_and_counted(trained, tmp_path):
    # Every unknown key was compared with every name SAC uses, and each close one warned about:
    # 200 000 keys (3.6 MB of `data`) took 28 s. The first 256 are looked at, 8 named.
    _, path, _ = trained
    edited = tmp_path / "many.zip"
    near = ["gamma"[:i] + c + "gamma"[i + 1 :] for i in range(5) for c in "bdefhk"][:27]  # one letter off
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(edited, "w") as out:
        for name in src.namelist():
            payload = src.read(name)
            if name == "data":
                data = json.loads(payload)
                data.update(dict.fromkeys(near, 0.5))
                data.update({f"zz_note_{i:06d}": i for i in range(20_000)})  # sorted after them: not looked at
                payload = json.dumps(data).encode()
            out.writestr(name, payload)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zipsave.load(edited, cls=SAC, env=venv())
    texts = [str(w.message) for w in caught]
    named = [t for t in texts if "which SAC neither takes nor sets (did you mean" in t]
    counted = [t for t in texts if "holds 19 more keys among the first 256 unknown ones close to names SAC uses" in t]
    assert len(named) == 8 and len(counted) == 1, texts


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
    with pytest.raises(
        zipsave.ArchiveFormatError, match=re.escape("holds a replay buffer or VecNormalize saved on its own")
    ) as raised:
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
        return DQN(
            "MultiInputPolicy",
            BitFlippingEnv(n_bits=5),
            buffer_size=200,
            replay_buffer_class=HerReplayBuffer,
            policy_kwargs={"net_arch": [8]},
            seed=0,
            device="cpu",
            **kwargs,
        )

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


# -- one rebuild path ------------------------------------------------------------------------
def test_another_algorithms_archive_gets_one_message_through_every_door(installed, trained):
    from stable_baselines3 import PPO

    _, path, _ = trained
    expected = re.escape("holds a SAC model; PPO cannot be built from it (")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the error, and nothing said before it (no VecNormalize note)
        with pytest.raises(zipsave.AlgorithmMismatchError, match=expected) as sb3_door:
            PPO.load(path)
        with pytest.raises(zipsave.AlgorithmMismatchError, match=expected) as zipsave_door:
            zipsave.load(path, cls=PPO)
    assert str(sb3_door.value) == str(zipsave_door.value)


def test_data_is_read_and_parsed_once_per_load(installed, trained, monkeypatch):
    from zipsave._archive._reader import ArchiveReader

    sac, path, _ = trained
    reads = []
    original = ArchiveReader.read

    def read(self, name, **kwargs):
        reads.append(name)
        return original(self, name, **kwargs)

    monkeypatch.setattr(ArchiveReader, "read", read)
    for load in (
        lambda: zipsave.load(path, cls=SAC, env=venv(), device="cpu"),
        lambda: SAC.load(path, env=venv(), device="cpu"),
    ):
        reads.clear()
        model = load()
        assert reads.count("data") == 1, reads
        same_buffer(model.replay_buffer, sac.replay_buffer)


def test_no_door_touches_the_warning_filters(installed, trained, monkeypatch):
    # the filters are process-wide: a load beside a training thread must not change them
    sac, path, checkpoint = trained
    envs = [venv() for _ in range(3)]
    fresh = SAC("MlpPolicy", envs[0], buffer_size=200, device="cpu", policy_kwargs={"net_arch": [8]})

    def touched(*args, **kwargs):
        raise AssertionError("a load changed the warning filters")

    for name in ("catch_warnings", "simplefilter", "filterwarnings", "resetwarnings"):
        monkeypatch.setattr(warnings, name, touched)
    zipsave.load(path, cls=SAC, env=envs[1], device="cpu")
    SAC.load(checkpoint, env=envs[2], device="cpu")
    fresh.load_replay_buffer(path)
    VecNormalize.load(path, envs[0])
    fresh.set_parameters(path)
    monkeypatch.undo()
    same_buffer(fresh.replay_buffer, sac.replay_buffer)


def test_set_parameters_reads_the_archive_into_the_live_model(installed, trained):
    sac, path, _ = trained
    fresh = SAC("MlpPolicy", venv(), buffer_size=200, device="cpu", policy_kwargs={"net_arch": [8]})
    weight = fresh.policy.actor.mu.weight
    fresh.set_parameters(path)
    assert fresh.policy.actor.mu.weight is weight  # filled in place, not replaced
    torch.testing.assert_close(weight, sac.policy.actor.mu.weight)
    other = SAC("MlpPolicy", venv(), device="cpu", policy_kwargs={"net_arch": [16]})
    with pytest.raises(
        zipsave.ParameterMismatchError,
        match=re.escape(
            "member `policy.pth`, key `actor.latent_pi.0.weight`: 16 saved tensor(s) do not fit the object: "
            "`actor.latent_pi.0.weight`: saved shape (8, 3), expected (16, 3)"
        ),
    ):
        other.set_parameters(path)


def test_a_her_wrapper_class_of_sb3_1_0_is_left_out(trained, tmp_path):
    import cloudpickle

    # SB3 1.0's HER saved the model class it wrapped (the RL Zoo's HER FetchReach-v1 agent)
    _, path, _ = trained
    edited = tmp_path / "her_1_0.zip"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(edited, "w") as out:
        for name in src.namelist():
            payload = src.read(name)
            if name == "data":
                data = json.loads(payload)
                data["model_class"] = {
                    ":type:": "<class 'abc.ABCMeta'>",
                    ":serialized:": base64.b64encode(cloudpickle.dumps(SAC)).decode(),
                }
                payload = json.dumps(data).encode()
            out.writestr(name, payload)
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.ZipsaveWarning, match="edited after saving"):
        model = zipsave.load(edited, cls=SAC, env=venv(), device="cpu", report=report)
    assert "model_class" not in vars(model)
    assert any("`model_class` (SAC) is what SB3 1.0's HER wrapper saved" in note for note in report.notes)


# -- keywords --------------------------------------------------------------------------------
def test_a_misspelt_option_warns_with_the_option(installed, trained):
    _, path, _ = trained
    with pytest.warns(
        zipsave.ZipsaveWarning,
        match=re.escape(
            "`mmpa=` is not an option of zipsave.load (did you mean `mmap`?); it was set as the attribute "
            "`model.mmpa`, as SB3 does with every keyword it does not know."
        ),
    ):
        model = zipsave.load(path, cls=SAC, env=venv(), device="cpu", mmpa=True)
    assert model.mmpa is True  # SB3's keywords-to-attributes behaviour stays
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = SAC.load(path, device="cpu", enviroment=venv())
    said = [str(w.message) for w in caught]
    assert any("`enviroment=` is not an option of SAC.load (did you mean `env`?)" in text for text in said), said
    assert model.env is None


def test_keywords_that_are_attributes_do_not_warn(installed, trained):
    _, path, _ = trained
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = zipsave.load(path, cls=SAC, env=venv(), device="cpu", gamma=0.9, verbose=0, seed=3)
        again = SAC.load(path, env=venv(), device="cpu", gamma=0.9, verbose=0)
    assert model.gamma == again.gamma == 0.9


def test_custom_objects_as_a_list_through_zipsave_load(trained):
    _, path, _ = trained
    with pytest.raises(
        TypeError, match=re.escape("found a list: ['learning_rate']. Pass e.g. custom_objects={'learning_rate': ...}")
    ):
        zipsave.load(path, cls=SAC, custom_objects=["learning_rate"])


# -- the best form through any door ----------------------------------------------------------
def test_model_save_with_the_replay_buffer_writes_zipsaves_members(trained, tmp_path):
    sac, _, _ = trained
    path = tmp_path / "sac_buffer.zip"
    with zipsave.sb3.installed():
        sac.save(path, include=["replay_buffer"])
        again = SAC.load(path, env=venv(), device="cpu")
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        data = json.loads(archive.read("data"))
    assert "replay_buffer/data" in names and any(n.startswith("replay_buffer/arrays/") for n in names)
    assert "replay_buffer" not in data  # no base64 pickle of the whole buffer
    same_buffer(again.replay_buffer, sac.replay_buffer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # SB3's own, e.g. about the saved env wrapper
        plain = SAC.load(path, env=venv(), device="cpu")  # SB3 alone: the model, without its buffer
    assert plain.replay_buffer.pos == 0 and not plain.replay_buffer.full


@pytest.fixture(scope="module")
def cartpole_ppo(tmp_path_factory):
    path = tmp_path_factory.mktemp("env") / "ppo.zip"
    zipsave.save(PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, policy_kwargs={"net_arch": [8]}), path)
    return path


@pytest.mark.parametrize("door", ["zipsave.load", "PPO.load"])
def test_an_env_with_other_spaces_is_the_callers_mistake_not_a_damaged_archive(cartpole_ppo, door):
    """It was an ArchiveFormatError: 'No archive written by zipsave or SB3 holds this; it is
    damaged or was made to break readers.'"""
    expected = (
        "the environment given as `env=` has observation_space=Box(-1.0, 1.0, (3,), float32) and "
        "action_space=Box(-2.0, 2.0, (1,), float32), but the saved PPO was trained with observation_space=Box("
    )
    with zipsave.sb3.installed() if door == "PPO.load" else contextlib.nullcontext():
        with pytest.raises(zipsave.ParameterMismatchError, match=re.escape(expected)) as caught:
            env = gym.make("Pendulum-v1", max_episode_steps=10)
            env.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)  # a short repr to match
            if door == "PPO.load":
                PPO.load(cartpole_ppo, env=env)
            else:
                zipsave.load(cartpole_ppo, cls=PPO, env=env)
    message = str(caught.value)
    assert (
        "action_space=Discrete(2). The observation_space differs: shape (3,) where the saved one has (4,). "
        "Pass an environment with the saved spaces"
    ) in message
    assert "damaged" not in message and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("version", [b"9.1.0", b"9" * 5000 + b".1"], ids=["newer", "5000-digit"])
def test_a_value_a_newer_sb3_wrote_names_both_versions(tmp_path, version):
    # a policy class of a module this SB3 lacks was refused with no word of the SB3 that wrote it
    # (and a version of 5 000 digits must not turn the refusal into Python's integer-text limit)
    PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, policy_kwargs={"net_arch": [8]}).save(tmp_path / "a.zip")
    with zipfile.ZipFile(tmp_path / "a.zip") as zin, zipfile.ZipFile(tmp_path / "newer.zip", "w") as zout:
        for name in zin.namelist():
            raw = zin.read(name)
            if name == "system_info.txt":
                raw = re.sub(rb"Stable-Baselines3: [^ \n]+", b"Stable-Baselines3: " + version, raw)
            if name == "data":
                data = json.loads(raw)
                pickled = base64.b64decode(data["policy_class"][":serialized:"]).replace(b".policies", b".policiez")
                data["policy_class"][":serialized:"] = base64.b64encode(pickled).decode()
                raw = json.dumps(data).encode()
            zout.writestr(name, raw)
    with pytest.raises(zipsave.DecodeError) as err:
        zipsave.load(tmp_path / "newer.zip", cls=PPO)
    assert "`stable_baselines3.common.policiez.ActorCriticPolicy`" in str(err.value)
    if version == b"9.1.0":
        assert (
            f"The archive was written by Stable-Baselines3 9.1.0, newer than the {stable_baselines3.__version__} "
            "installed here; if the value names something that version added, upgrade"
        ) in str(err.value)


@pytest.mark.parametrize(
    ("observation_space", "action_space", "how"),
    [
        # CartPole's spaces with unbounded observations: the two reprs differ in bounds only
        (
            gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
            gym.spaces.Discrete(2),
            "observation_space differs only in its bounds (`low`, `high`): the same shape and dtype.",
        ),
        (
            gym.spaces.Box(-1.0, 1.0, (4,), np.float64),
            gym.spaces.Discrete(2),
            "observation_space differs: dtype float64 where the saved one has float32.",
        ),
        (None, gym.spaces.Discrete(3), "action_space differs: n=3 where the saved one has 2."),
        (
            None,
            gym.spaces.MultiDiscrete([2]),
            "action_space differs: a MultiDiscrete where the saved one is a Discrete.",
        ),
    ],
)
def test_an_env_with_other_spaces_says_which_differs_and_how(cartpole_ppo, observation_space, action_space, how):
    # both spaces were shown in full, with nothing said of which one SB3 found different
    env = gym.make("CartPole-v1", max_episode_steps=10)
    env.observation_space = observation_space or env.observation_space
    env.action_space = action_space
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape(f"). The {how} Pass an environment")):
        zipsave.load(cartpole_ppo, cls=PPO, env=env)


def test_an_env_id_instead_of_an_env_says_how_to_make_one(cartpole_ppo):
    with pytest.raises(
        zipsave.ParameterMismatchError,
        match=re.escape(
            "`env=` is the string 'CartPole-v1', not an environment. "
            "Pass the environment itself: `env=gymnasium.make('CartPole-v1')`."
        ),
    ):
        zipsave.load(cartpole_ppo, cls=PPO, env="CartPole-v1")
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape("`env=` is of type int, not an environment.")):
        zipsave.load(cartpole_ppo, cls=PPO, env=3)


def test_a_class_name_instead_of_the_class_is_a_type_error_before_reading(cartpole_ppo):
    with pytest.raises(
        zipsave.UsageError, match=re.escape("cls must be a class, found str 'PPO'. Pass the class itself")
    ):
        zipsave.load(cartpole_ppo, cls="PPO")


def with_data(source, target, **changes):
    """A copy of the archive ``source`` whose ``data`` has ``changes``, without a manifest."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as out:
        for name in src.namelist():
            if name == "manifest.json":
                continue
            payload = src.read(name)
            if name == "data":
                payload = json.dumps({**json.loads(payload), **changes}).encode()
            out.writestr(name, payload)
    return target


@pytest.mark.parametrize(
    ("key", "value", "entry"),
    [
        ("replay_buffer_kwargs", 5, ""),
        ("replay_buffer_kwargs", [1], ""),
        ("rollout_buffer_kwargs", "x", ""),
        ("policy_kwargs", {"net_arch": [8], "optimizer_kwargs": 5}, "`optimizer_kwargs` "),
    ],
)
def test_keyword_arguments_that_are_no_dict_are_named(installed, trained, cartpole_ppo, tmp_path, key, value, entry):
    # `replay_buffer_kwargs: 5` was "SAC cannot be built from this archive's data (AttributeError:
    # 'int' object has no attribute 'copy')", naming no key
    cls, source = (PPO, cartpole_ppo) if key == "rollout_buffer_kwargs" else (SAC, trained[1])
    path = with_data(source, tmp_path / "edited.zip", **{key: value})
    found = type(value if not entry else 5).__name__
    expected = f"member `data`, key `{key}`: {entry}must be a dict of keyword arguments, found a {found}."
    for load in (lambda: zipsave.load(path, cls=cls, device="cpu"), lambda: cls.load(path, device="cpu")):
        with pytest.raises(zipsave.DecodeError, match=re.escape(expected)) as caught:
            load()
        assert caught.value.key == key
