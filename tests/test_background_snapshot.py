"""Incremental snapshots of SB3 replay buffers in background saves: after the first save fills a
shadow copy, each save copies only the rows written since, and its archive is byte for byte a
plain save's at the moment of the call (every buffer kind, wrap-around, several envs); whatever
does not add up falls back to a full copy; a shadow a writer still holds is never updated."""

from __future__ import annotations

import gc
import io
import logging
import threading

import gymnasium as gym
import numpy as np
import pytest

import zipsave

pytest.importorskip("stable_baselines3")

from stable_baselines3 import DQN, SAC, HerReplayBuffer  # noqa: E402
from stable_baselines3.common.buffers import NStepReplayBuffer, ReplayBuffer  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.envs import BitFlippingEnv  # noqa: E402

from zipsave._api import _shadow  # noqa: E402
from zipsave.sb3 import _snapshot  # noqa: E402

RB = ["replay_buffer"]


class Features(gym.Env):
    """Random Box (or Dict) observations; episodes of 7 steps."""

    def __init__(self, dict_obs=False, continuous=False, width=16):
        box = gym.spaces.Box(-1, 1, (width,), np.float32)
        self.observation_space = (
            gym.spaces.Dict({"a": box, "b": gym.spaces.Box(0, 255, (3,), np.uint8)}) if dict_obs else box
        )
        self.action_space = gym.spaces.Box(-1, 1, (2,), np.float32) if continuous else gym.spaces.Discrete(3)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), 1.0, self.t >= 7, False, {}


class OwnBuffer(ReplayBuffer):
    """Not SB3's own class: its rows might be written anywhere."""


def make(kind, buffer_size=50, width=16):
    kw = {
        "buffer_size": buffer_size,
        "learning_starts": 10,
        "train_freq": 4,
        "batch_size": 8,
        "device": "cpu",
        "seed": 0,
        "policy_kwargs": {"net_arch": [8]},
    }
    if kind == "replay":
        return DQN("MlpPolicy", Features(width=width), **kw)
    if kind == "two_envs":
        return DQN("MlpPolicy", make_vec_env(Features, n_envs=2, seed=0), **kw)
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
        return SAC(
            "MlpPolicy",
            Features(continuous=True),
            replay_buffer_class=NStepReplayBuffer,
            replay_buffer_kwargs={"n_steps": 3, "gamma": 0.99},
            **kw,
        )
    if kind == "her":
        venv = make_vec_env(BitFlippingEnv, n_envs=1, seed=0, env_kwargs={"n_bits": 4, "max_steps": 5})
        return DQN("MultiInputPolicy", venv, replay_buffer_class=HerReplayBuffer, **kw)
    if kind == "own_class":
        return DQN("MlpPolicy", Features(), replay_buffer_class=OwnBuffer, **kw)
    raise AssertionError(kind)


@pytest.fixture(autouse=True)
def fresh_shadows(caplog):
    zipsave.release_snapshots()
    caplog.set_level(logging.DEBUG, logger="zipsave")
    yield
    zipsave.release_snapshots()


@pytest.fixture
def every_array_by_rows(monkeypatch):
    """Track the rows of every row-indexed array, however small (the tests' buffers are tiny)."""
    monkeypatch.setattr(_snapshot, "_ROW_MIN_BYTES", 0)


def snapshots(caplog):
    """The kind of each snapshot logged since the last call: "full", "incremental", "afresh",
    and "waiting" where a save waited for an earlier writer to let the shadow go."""
    out = []
    for record in caplog.records:
        message = record.getMessage()
        if message.startswith("background save: full snapshot"):
            out.append("full")
        elif message.startswith("background save: incremental snapshot"):
            out.append("incremental")
        elif "copying afresh" in message:
            out.append("afresh")
        elif message.startswith("background save: waiting for the save still writing"):
            out.append("waiting")
    caplog.clear()
    return out


def reasons(caplog):
    return [r.getMessage() for r in caplog.records if "snapshot" in r.getMessage()]


def plain_bytes(model, tmp_path, name="plain.zip"):
    path = tmp_path / name
    zipsave.save(model, path, include=RB)
    return path.read_bytes()


def background(model, path, **kwargs):
    return zipsave.save(model, path, include=RB, background=True, incremental=True, **kwargs)


@pytest.mark.parametrize("kind", ["replay", "two_envs", "dict", "optimize_memory_usage", "nstep", "her"])
def test_successive_background_saves_are_plain_saves_byte_for_byte(kind, tmp_path, caplog, every_array_by_rows):
    model = make(kind)
    model.learn(20)
    kinds = []
    for i, steps in enumerate([30, 1, 0, 37, 60]):  # wraps the buffer of 50 rows, then refills it
        path = tmp_path / f"bg{i}.zip"
        handle = background(model, path)
        kinds += snapshots(caplog)
        want = plain_bytes(model, tmp_path)  # the state of the call: training has not resumed
        model.learn(steps, reset_num_timesteps=False)  # while the writer may still be writing
        handle.wait()
        assert path.read_bytes() == want, f"save {i}"
    assert model.replay_buffer.full
    assert kinds == ["full", "incremental", "incremental", "incremental", "incremental"]


def test_an_episode_ended_without_a_new_row_is_saved(tmp_path, caplog, every_array_by_rows):
    model = make("her")
    model.learn(23)  # inside an episode of 5 steps
    background(model, tmp_path / "a.zip").wait()
    buffer = model.replay_buffer
    assert not buffer.dones[buffer.pos - 1].any()
    with pytest.warns(UserWarning, match="last trajectory"):
        buffer.truncate_last_trajectory()  # what SB3's load_replay_buffer does
    assert buffer.dones[buffer.pos - 1].all()
    snapshots(caplog)
    background(model, tmp_path / "b.zip").wait()
    assert snapshots(caplog) == ["incremental"]
    assert (tmp_path / "b.zip").read_bytes() == plain_bytes(model, tmp_path)


def test_a_real_sized_buffer_copies_only_its_new_rows(tmp_path, caplog):
    model = make("replay", buffer_size=600, width=512)  # 1.2 MB of observations: tracked by rows
    assert model.replay_buffer.observations.nbytes >= _snapshot._ROW_MIN_BYTES
    model.learn(100)
    background(model, tmp_path / "a.zip").wait()
    model.learn(40, reset_num_timesteps=False)
    caplog.clear()
    handle = background(model, tmp_path / "b.zip")
    handle.wait()
    (message,) = [m for m in reasons(caplog) if "incremental" in m]
    assert "rows [(100, 140)]" in message
    copied = int(message.rsplit("(", 1)[1].split()[-2])
    buffer = model.replay_buffer
    assert copied < (buffer.observations.nbytes + buffer.next_observations.nbytes) / 10  # 40 rows of 600, small arrays
    assert (tmp_path / "b.zip").read_bytes() == plain_bytes(model, tmp_path)


@pytest.mark.parametrize(
    "change, reason",
    [
        ("edit", "sampled row"),
        ("reset_counter", "num_timesteps moved by"),
        ("move_pos", "pos is"),
        ("replace", "was replaced, moved or reshaped"),
        ("full", "full is"),
    ],
)
def test_what_does_not_add_up_falls_back_to_a_full_copy(change, reason, tmp_path, caplog, every_array_by_rows):
    model = make("replay")
    model.learn(20)
    background(model, tmp_path / "a.zip").wait()
    model.learn(10, reset_num_timesteps=False)
    buffer = model.replay_buffer
    if change == "edit":  # by hand, outside the rows written since (or a reset and refill)
        buffer.observations[:20] += 1
    elif change == "reset_counter":
        model.num_timesteps = 5  # learn(reset_num_timesteps=True) starts again at 0
    elif change == "move_pos":
        buffer.pos += 1
    elif change == "replace":
        buffer.rewards = buffer.rewards.copy()
    else:
        buffer.full = True
    snapshots(caplog)
    handle = background(model, tmp_path / "b.zip")
    messages = reasons(caplog)
    assert snapshots(caplog) == ["full"] and any(reason in m for m in messages), messages
    handle.wait()
    assert (tmp_path / "b.zip").read_bytes() == plain_bytes(model, tmp_path)
    model.learn(5, reset_num_timesteps=False)  # the shadow matches again: the next one is incremental
    background(model, tmp_path / "c.zip").wait()
    assert snapshots(caplog) == ["incremental"]
    assert (tmp_path / "c.zip").read_bytes() == plain_bytes(model, tmp_path)


def test_other_buffer_classes_and_plain_background_saves_keep_no_shadow(tmp_path, caplog):
    model = make("own_class")
    model.learn(20)
    background(model, tmp_path / "a.zip").wait()
    assert snapshots(caplog) == [] and len(_shadow._shadows) == 0
    model = make("replay")
    model.learn(20)
    zipsave.save(model, tmp_path / "b.zip", include=RB, background=True).wait()  # incremental=False
    # a copy of the save's own (made as a first snapshot is), not kept for the next save
    assert snapshots(caplog) == ["full"] and len(_shadow._shadows) == 0
    assert (tmp_path / "b.zip").read_bytes() == plain_bytes(model, tmp_path)


class GatedFile(io.BytesIO):
    """A destination whose writes wait until the test opens the gate."""

    def __init__(self, fail=False):
        super().__init__()
        self.gate = threading.Event()
        self.fail = fail
        self.name = "gated.zip"

    def write(self, b):
        assert self.gate.wait(30), "the test never opened the gate"
        if self.fail:
            raise OSError("disk full")
        return super().write(b)


def test_a_save_waits_for_the_writer_that_holds_the_shadow(tmp_path, caplog, every_array_by_rows):
    model = make("replay")
    model.learn(20)
    background(model, tmp_path / "a.zip").wait()
    model.learn(10, reset_num_timesteps=False)
    gated = GatedFile()
    slow = background(model, gated)  # holds the shadow until it has written
    first = plain_bytes(model, tmp_path, "first.zip")
    model.learn(15, reset_num_timesteps=False)
    second_bytes = plain_bytes(model, tmp_path, "second.zip")
    snapshots(caplog)
    started = []
    saver = threading.Thread(target=lambda: started.append(background(model, tmp_path / "b.zip")))
    saver.start()
    saver.join(0.5)
    assert saver.is_alive() and not started, "the second save did not wait for the shadow"
    assert not slow.done()
    gated.gate.set()
    slow.wait(30)
    saver.join(30)
    started[0].wait(30)
    assert gated.getvalue() == first  # the shadow was not touched while the first save wrote
    assert snapshots(caplog) == ["waiting", "incremental"]  # 15 rows, not a copy of the buffer
    assert (tmp_path / "b.zip").read_bytes() == second_bytes
    model.learn(12, reset_num_timesteps=False)
    background(model, tmp_path / "c.zip").wait()
    assert snapshots(caplog) == ["incremental"]
    assert (tmp_path / "c.zip").read_bytes() == plain_bytes(model, tmp_path)


def test_a_buffer_reached_twice_in_one_save_is_copied_afresh_the_second_time(caplog, every_array_by_rows):
    model = make("replay")
    model.learn(20)
    source = _snapshot.replay_snapshot(model, model.replay_buffer)
    arrays = [("observations", model.replay_buffer.observations)]
    held = []
    first = _shadow.take(source, arrays, held)
    assert first is not None
    held.append(first[1])  # as the save does
    second = _shadow.take(source, arrays, held)  # would wait on itself for ever
    assert second is None and snapshots(caplog) == ["full", "afresh"]
    first[1]()  # let go: another save takes it again
    third = _shadow.take(source, arrays, [])
    assert third is not None and snapshots(caplog) == ["incremental"]
    third[1]()


def test_the_shadow_is_let_go_when_a_save_fails(tmp_path, caplog, monkeypatch, every_array_by_rows):
    model = make("replay")
    model.learn(20)
    failing = GatedFile(fail=True)
    failing.gate.set()
    handle = background(model, failing)
    with pytest.raises(OSError, match="disk full"):
        handle.wait(30)
    model.learn(5, reset_num_timesteps=False)
    snapshots(caplog)
    background(model, tmp_path / "a.zip").wait()
    assert snapshots(caplog) == ["incremental"]  # neither held nor spoilt by the failed writer
    assert (tmp_path / "a.zip").read_bytes() == plain_bytes(model, tmp_path)

    def broken(*args):
        raise MemoryError("no room for the rows")

    monkeypatch.setattr(_shadow._Shadow, "_copy_rows", broken)
    model.learn(5, reset_num_timesteps=False)
    with pytest.raises(MemoryError):
        background(model, tmp_path / "b.zip")
    monkeypatch.undo()
    monkeypatch.setattr(_snapshot, "_ROW_MIN_BYTES", 0)
    snapshots(caplog)
    background(model, tmp_path / "b.zip").wait()  # a copy that failed midway matches nothing
    assert snapshots(caplog) == ["full"]
    assert (tmp_path / "b.zip").read_bytes() == plain_bytes(model, tmp_path)


def test_release_snapshots_and_a_freed_buffer_give_the_memory_back(tmp_path, caplog):
    model = make("replay", buffer_size=600, width=512)
    model.learn(20)
    background(model, tmp_path / "a.zip").wait()
    arrays = [model.replay_buffer.observations, model.replay_buffer.next_observations]
    assert zipsave.release_snapshots() >= sum(a.nbytes for a in arrays)
    assert zipsave.release_snapshots() == 0
    snapshots(caplog)
    background(model, tmp_path / "b.zip").wait()
    assert snapshots(caplog) == ["full"]  # filled again
    assert len(_shadow._shadows) == 1
    del model, arrays
    gc.collect()
    assert len(_shadow._shadows) == 0  # weakly keyed: gone with the buffer


def test_checkpoint_callback_saves_incrementally(tmp_path, caplog, every_array_by_rows):
    model = make("replay")
    callback = zipsave.sb3.CheckpointCallback(tmp_path / "ckpt", every_steps=20, include=RB)
    model.learn(70, callback=callback)
    callback.close()
    # A save that finds the shadow still being written waits for that writer (logged "waiting"
    # on a busy machine), then copies incrementally: never a second copy of the buffer.
    kinds = [kind for kind in snapshots(caplog) if kind != "waiting"]
    assert len(kinds) >= 3 and kinds == ["full"] + ["incremental"] * (len(kinds) - 1), kinds
    latest = zipsave.load(callback.manager.latest().path, cls=DQN, device="cpu")
    assert latest.num_timesteps == model.num_timesteps and latest.replay_buffer.pos == model.replay_buffer.pos
    for name in ("observations", "actions", "rewards", "dones"):
        assert np.array_equal(getattr(latest.replay_buffer, name), getattr(model.replay_buffer, name)), name
