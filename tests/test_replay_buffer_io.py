"""Replay buffers in the archive, every kind SB3 and sb3-contrib have: read into fresh memory
(copying) or mapped copy-on-write from the archive (``mmap=True``), element for element the
saved ones; writes to a mapped buffer never reach the archive; a damaged member is an error."""

from __future__ import annotations

import hashlib
import struct
import zipfile

import gymnasium as gym
import numpy as np
import pytest

import zipsave

pytest.importorskip("stable_baselines3")  # the `test` extra installs it
if not __import__("sys").platform.startswith("linux"):
    pytest.skip("the mapping checks read /proc/self/maps", allow_module_level=True)

from stable_baselines3 import DQN, SAC, HerReplayBuffer
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import BitFlippingEnv

OBS = 512  # float32 features: a buffer of 1000 transitions holds 4 MB of observations


class Features(gym.Env):
    """Box (or Dict) observations, discrete or continuous actions; never stepped by the tests."""

    def __init__(self, dict_obs: bool = False, continuous: bool = False) -> None:
        box = gym.spaces.Box(-1, 1, (OBS,), np.float32)
        self.observation_space = (
            gym.spaces.Dict({"a": box, "b": gym.spaces.Box(0, 255, (8,), np.uint8)}) if dict_obs else box
        )
        self.action_space = gym.spaces.Box(-1, 1, (2,), np.float32) if continuous else gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def _random_fill(buffer, seed=0):
    rng = np.random.default_rng(seed)
    for value in vars(buffer).values():
        arrays = value.values() if isinstance(value, dict) else [value]
        for arr in arrays:
            if not isinstance(arr, np.ndarray) or arr.dtype == object:
                continue
            if arr.dtype.kind == "f":
                arr[...] = rng.standard_normal(arr.shape)
            elif arr.dtype == np.bool_:
                arr[...] = rng.random(arr.shape) < 0.5
            else:
                arr[...] = rng.integers(0, 3, arr.shape)
    buffer.pos, buffer.full = 7, True


def _model(kind):
    kw = {"buffer_size": 1000, "learning_starts": 0, "device": "cpu", "seed": 0, "policy_kwargs": {"net_arch": [8]}}
    if kind == "replay":
        return DQN("MlpPolicy", Features(), **kw)
    if kind == "dict":
        return DQN("MultiInputPolicy", Features(dict_obs=True), **kw)
    if kind == "optimize_memory_usage":
        return DQN(
            "MlpPolicy",
            Features(),
            optimize_memory_usage=True,
            replay_buffer_kwargs={"handle_timeout_termination": False},
            **kw,
        )
    if kind == "nstep":
        from stable_baselines3.common.buffers import NStepReplayBuffer

        return SAC(
            "MlpPolicy",
            Features(continuous=True),
            replay_buffer_class=NStepReplayBuffer,
            replay_buffer_kwargs={"n_steps": 3, "gamma": 0.99},
            **kw,
        )
    if kind == "qrdqn":
        from sb3_contrib import QRDQN

        return QRDQN("MlpPolicy", Features(), **kw)
    if kind == "tqc":
        from sb3_contrib import TQC

        return TQC("MlpPolicy", Features(continuous=True), **kw)
    raise AssertionError(kind)


def _her():
    venv = make_vec_env(BitFlippingEnv, n_envs=1, seed=0, env_kwargs={"n_bits": 4, "max_steps": 4})
    model = DQN(
        "MultiInputPolicy",
        venv,
        buffer_size=200,
        learning_starts=40,
        train_freq=4,
        replay_buffer_class=HerReplayBuffer,
        policy_kwargs={"net_arch": [8]},
        seed=0,
        device="cpu",
    )
    model.learn(120)
    return model


KINDS = ["replay", "dict", "optimize_memory_usage", "nstep", "qrdqn", "tqc", "her"]
_saved: dict = {}


def _saved_model(kind, tmp_path_factory):
    """One model per kind per session, saved with its buffer."""
    if kind not in _saved:
        if kind == "her":
            model = _her()
        else:
            model = _model(kind)
            _random_fill(model.replay_buffer)
        path = tmp_path_factory.mktemp(kind) / "model.zip"
        zipsave.save(model, path, include=["replay_buffer"])
        _saved[kind] = (model, path)
    return _saved[kind]


def _arrays(buffer):
    out = {}
    for name, value in vars(buffer).items():
        if isinstance(value, np.ndarray) and value.dtype != object:
            out[name] = value
        elif isinstance(value, dict) and value and all(isinstance(v, np.ndarray) for v in value.values()):
            out.update({f"{name}.{k}": v for k, v in value.items()})
    return out


def _same_buffer(new, old):
    assert (new.pos, new.full) == (old.pos, old.full)
    want, got = _arrays(old), _arrays(new)
    assert sorted(want) == sorted(got)
    for name, arr in want.items():
        assert got[name].dtype == arr.dtype and got[name].shape == arr.shape, name
        assert np.array_equal(got[name], arr), name  # element for element


def _is_mapped(arr, path):
    """``arr``'s memory lies in a mapping of the file ``path`` (``/proc/self/maps``)."""
    address = arr.__array_interface__["data"][0]
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return len(fields) == 6 and fields[5].strip() == str(path.resolve())
    return False


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cls(model):
    return type(model)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mapped", [False, True], ids=["copy", "mmap"])
def test_load_gives_the_saved_buffer(kind, mapped, tmp_path_factory):
    model, path = _saved_model(kind, tmp_path_factory)
    env = model.get_env() if kind == "her" else None
    loaded = zipsave.load(path, cls=_cls(model), mmap=mapped, env=env, device="cpu")
    assert type(loaded.replay_buffer) is type(model.replay_buffer)
    if kind != "her":  # HER ends the unfinished episode on load, as SB3 does: checked in test_sb3_her
        _same_buffer(loaded.replay_buffer, model.replay_buffer)
    observations = loaded.replay_buffer.observations
    big = observations["observation"] if kind == "her" else observations["a"] if kind == "dict" else observations
    assert _is_mapped(big, path) is mapped
    loaded.replay_buffer.sample(16)


@pytest.mark.parametrize("kind", ["replay", "dict", "her"])
def test_restore_mmap_into_a_live_model(kind, tmp_path_factory):
    model, path = _saved_model(kind, tmp_path_factory)
    live = _her() if kind == "her" else _model(kind)
    zipsave.restore(live, path, mmap=True, device="cpu")
    if kind != "her":
        _same_buffer(live.replay_buffer, model.replay_buffer)
    obs = live.replay_buffer.observations
    assert _is_mapped(obs["observation"] if kind == "her" else obs["a"] if kind == "dict" else obs, path)


def test_writes_to_a_mapped_buffer_are_private(tmp_path_factory):
    model, path = _saved_model("replay", tmp_path_factory)
    before = _digest(path)
    loaded = zipsave.load(path, cls=DQN, mmap=True, device="cpu")
    buffer = loaded.replay_buffer
    buffer.observations[:] = 0.5  # what training does to a buffer, everywhere at once
    buffer.add(
        np.ones((1, OBS), np.float32),
        np.ones((1, OBS), np.float32),
        np.array([1]),
        np.array([1.0]),
        np.array([False]),
        [{}],
    )
    assert (buffer.observations[:7] == 0.5).all() and (buffer.observations[7] == 1).all()
    assert _digest(path) == before
    again = zipsave.load(path, cls=DQN, mmap=True, device="cpu")
    _same_buffer(again.replay_buffer, model.replay_buffer)


def test_mapped_buffer_outlives_the_archive_being_saved_over(tmp_path):
    model = _model("replay")
    _random_fill(model.replay_buffer, seed=1)
    path = tmp_path / "m.zip"
    zipsave.save(model, path, include=["replay_buffer"])
    loaded = zipsave.load(path, cls=DQN, mmap=True, device="cpu")
    _random_fill(model.replay_buffer, seed=2)
    zipsave.save(model, path, include=["replay_buffer"])  # a new file renamed over the mapped one
    _random_fill(model.replay_buffer, seed=1)
    _same_buffer(loaded.replay_buffer, model.replay_buffer)


# -- damaged members ---------------------------------------------------------------------------
def _data_offset(path, member):
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    with open(path, "rb") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack("<HH", f.read(4))
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def _observations_member(path):
    with zipfile.ZipFile(path) as zf:
        return max(
            (i for i in zf.infolist() if i.filename.startswith("replay_buffer/arrays/")), key=lambda i: i.file_size
        ).filename


def _truncated_copy(saved, member, path):
    """``saved`` re-zipped at ``path`` with the last 64 bytes of ``member`` cut off."""
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data[:-64] if info.filename == member else data)
    return path


@pytest.mark.parametrize("mapped", [False, True], ids=["copy", "mmap"])
def test_a_corrupt_buffer_member_is_an_integrity_error(mapped, tmp_path_factory, tmp_path):
    _, saved = _saved_model("replay", tmp_path_factory)
    path = tmp_path / "bad.zip"
    path.write_bytes(saved.read_bytes())
    member = _observations_member(path)
    start, size = _data_offset(path, member)
    with open(path, "r+b") as f:
        f.seek(start + size - 5)
        byte = f.read(1)
        f.seek(start + size - 5)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(zipsave.IntegrityError) as caught:
        zipsave.load(path, cls=DQN, mmap=mapped, device="cpu")
    assert caught.value.member == member
    assert "CRC-32" in str(caught.value)


@pytest.mark.parametrize("mapped", [False, True], ids=["copy", "mmap"])
def test_a_truncated_buffer_member_is_a_zipsave_error(mapped, tmp_path_factory, tmp_path):
    _, saved = _saved_model("replay", tmp_path_factory)
    member = _observations_member(saved)
    path = _truncated_copy(saved, member, tmp_path / "short.zip")
    with pytest.raises(zipsave.ZipsaveError) as caught:
        zipsave.load(path, cls=DQN, mmap=mapped, device="cpu")
    assert member in str(caught.value)


@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "pread"])
def test_a_mapped_member_is_checked_piece_by_piece(in_place, tmp_path_factory, tmp_path, monkeypatch):
    from zipsave._archive import _crc_pool
    from zipsave._tensors import _prefault

    monkeypatch.setattr(_prefault, "CHECK_IN_PLACE", in_place)
    monkeypatch.setattr(_prefault, "CHECK_WINDOW", 10_000)  # many windows, none on a page boundary
    monkeypatch.setattr(_crc_pool, "READ_PIECE", 10_000)
    model, saved = _saved_model("replay", tmp_path_factory)
    _same_buffer(zipsave.load(saved, cls=DQN, mmap=True, device="cpu").replay_buffer, model.replay_buffer)
    path = tmp_path / "bad.zip"
    path.write_bytes(saved.read_bytes())
    start, size = _data_offset(path, _observations_member(path))
    with open(path, "r+b") as f:
        f.seek(start + size // 2)
        byte = f.read(1)
        f.seek(start + size // 2)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(zipsave.IntegrityError, match="CRC-32"):
        zipsave.load(path, cls=DQN, mmap=True, device="cpu")
