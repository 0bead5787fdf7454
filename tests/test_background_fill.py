"""A large copy into a replay buffer's shadow (the first snapshot) is made by the save's writer
thread while training goes on: a write barrier on SB3's own writing methods copies each row
before it is overwritten, so the archive is exactly the buffer at the call, whatever training
writes meanwhile. The barrier lives on the class for the copy only (nothing on the buffer, so
it pickles as ever), and a copy that fails or never runs leaves no shadow marked valid.

The tests force the background path on tiny buffers (``BACKGROUND_MIN_BYTES = 0``) with one
row per chunk, and hold the writer's copy at a gate while training runs: nothing depends on
timing."""

from __future__ import annotations

import logging
import pickle
import threading
import time

import numpy as np
import pytest

import zipsave

pytest.importorskip("stable_baselines3")

from stable_baselines3 import DQN  # noqa: E402
from stable_baselines3.common.buffers import DictReplayBuffer, NStepReplayBuffer, ReplayBuffer  # noqa: E402
from stable_baselines3.her import HerReplayBuffer  # noqa: E402
from test_background_snapshot import background, make, plain_bytes, snapshots  # noqa: E402

from zipsave._api import _background, _shadow  # noqa: E402
from zipsave.sb3 import _snapshot  # noqa: E402

CLASSES = (ReplayBuffer, DictReplayBuffer, NStepReplayBuffer, HerReplayBuffer)
WRITERS = ("add", "_get_samples", "truncate_last_trajectory")


def own_methods():
    return {(cls, name): cls.__dict__.get(name) for cls in CLASSES for name in WRITERS}


ORIGINAL = own_methods()


@pytest.fixture(autouse=True)
def in_the_background(caplog, monkeypatch):
    """Every shadow copy goes to the writer thread, one row per chunk; afterwards SB3's classes
    have their own methods again and nothing is watched."""
    zipsave.release_snapshots()
    caplog.set_level(logging.DEBUG, logger="zipsave")
    monkeypatch.setattr(_snapshot, "_ROW_MIN_BYTES", 0)
    monkeypatch.setattr(_shadow, "BACKGROUND_MIN_BYTES", 0)
    monkeypatch.setattr(_shadow, "CHUNK_BYTES", 1)
    yield
    zipsave.release_snapshots()
    assert own_methods() == ORIGINAL
    assert not _snapshot._watchers and not _snapshot._guarded


class Gate:
    """Holds the writer's copy after ``after`` chunks (between two chunks) until ``open()``;
    counts the chunks that the barrier (the training thread) copied."""

    def __init__(self, after=0, fail_writer=False, fail_barrier=False):
        self.after, self.fail_writer, self.fail_barrier = after, fail_writer, fail_barrier
        self.held, self.go = threading.Event(), threading.Event()
        self.by_writer = self.by_barrier = 0
        claim, copy = _shadow._Fill._claim, _shadow._Fill._copy

        def gated_claim(fill):
            if self.by_writer == self.after:
                self.held.set()
                assert self.go.wait(30), "the test never opened the gate"
            return claim(fill)

        def counted_copy(fill, chunk):
            if threading.current_thread().name.startswith("zipsave-save"):
                self.by_writer += 1
                if self.fail_writer and self.by_writer > self.after:
                    raise MemoryError("no room for the chunk")
            else:
                self.by_barrier += 1
                if self.fail_barrier:
                    raise MemoryError("no room for the row")
            copy(fill, chunk)

        self._patch = pytest.MonkeyPatch()
        self._patch.setattr(_shadow._Fill, "_claim", gated_claim)
        self._patch.setattr(_shadow._Fill, "_copy", counted_copy)

    def wait_held(self):
        assert self.held.wait(30), "the writer never reached the gate"

    def open(self):
        self.go.set()

    def remove(self):
        self.go.set()
        self._patch.undo()


@pytest.fixture
def gate():
    """``gate(after=..., ...)`` makes a new gate (the one before it removed)."""
    made = []

    def make_gate(**kwargs):
        for old in made:
            old.remove()
        made.append(Gate(**kwargs))
        return made[-1]

    yield make_gate
    for old in made:
        old.remove()
    for _ in range(3000):  # a test that failed midway: let its writer end before the checks
        if not _snapshot._watchers:
            break
        time.sleep(0.01)


def watched():
    return {cls for cls, _ in _snapshot._guarded.items()}


@pytest.mark.parametrize("kind", ["replay", "two_envs", "dict", "optimize_memory_usage", "nstep", "her"])
@pytest.mark.parametrize("after", [0, 7])
def test_rows_written_during_the_copy_stay_out_of_the_archive(kind, after, tmp_path, caplog, gate):
    model = make(kind)
    model.learn(20)
    # the second save's new rows reach past the rows it copies (wrapping the buffer of 50 rows)
    for i, steps in enumerate([37, 90]):
        held = gate(after=after)
        path = tmp_path / f"bg{i}.zip"
        handle = background(model, path)
        want = plain_bytes(model, tmp_path)  # a synchronous save at the call
        held.wait_held()
        assert type(model.replay_buffer) in watched()
        model.learn(steps, reset_num_timesteps=False)  # adds, samples, episode ends
        assert held.by_barrier > 0  # training wrote rows the writer had not copied yet
        held.open()
        handle.wait(30)
        assert path.read_bytes() == want, f"save {i}"
    assert snapshots(caplog) == ["full", "incremental"]


def test_the_loaded_archive_is_the_buffer_at_the_call(tmp_path, gate):
    model = make("replay")
    model.learn(30)
    buffer = model.replay_buffer
    names = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
    at_call = {name: getattr(buffer, name).copy() for name in names}
    pos, full = buffer.pos, buffer.full
    held = gate(after=3)
    handle = background(model, tmp_path / "bg.zip")
    held.wait_held()
    model.learn(45, reset_num_timesteps=False)
    buffer.reset()  # pos 0: the rows are written from the start again
    model.learn(10, reset_num_timesteps=False)
    changed = [name for name in names if not np.array_equal(getattr(buffer, name), at_call[name])]
    assert "observations" in changed
    held.open()
    handle.wait(30)
    loaded = zipsave.load(tmp_path / "bg.zip", cls=DQN, device="cpu").replay_buffer
    assert (loaded.pos, loaded.full) == (pos, full)
    for name in names:
        assert np.array_equal(getattr(loaded, name), at_call[name]), name


def test_the_buffer_holds_nothing_of_the_barrier_and_pickles_as_ever(tmp_path, gate):
    model = make("replay")
    model.learn(20)
    buffer = model.replay_buffer
    before = set(vars(buffer))
    held = gate()
    handle = background(model, tmp_path / "bg.zip")
    held.wait_held()
    assert set(vars(buffer)) == before  # nothing on the instance
    assert ReplayBuffer.__dict__["add"] is not ORIGINAL[(ReplayBuffer, "add")]  # on the class, for now
    copy = pickle.loads(pickle.dumps(buffer))  # what SB3's save_replay_buffer does
    model.save_replay_buffer(tmp_path / "sb3.pkl")
    assert set(vars(copy)) == before
    other = make("own_class")  # a subclass inherits the guarded `add`: its calls go straight through
    other.learn(15)
    model.learn(10, reset_num_timesteps=False)
    obs = np.ones((1, *copy.obs_shape), np.float32)
    copy.add(obs, obs, np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{}])  # not watched: no chunk copied
    assert held.by_barrier >= 10 and np.array_equal(copy.observations[20], obs)
    held.open()
    handle.wait(30)
    assert own_methods() == ORIGINAL and not _snapshot._watchers


def test_two_buffers_of_one_class_copied_at_once(tmp_path, gate):
    first, second = make("replay"), make("replay")
    first.learn(20)
    second.learn(25)
    held = gate()
    handles = [background(first, tmp_path / "a.zip"), background(second, tmp_path / "b.zip")]
    wants = [plain_bytes(first, tmp_path, "pa.zip"), plain_bytes(second, tmp_path, "pb.zip")]
    held.wait_held()
    first.learn(30, reset_num_timesteps=False)
    second.learn(30, reset_num_timesteps=False)
    held.open()
    for handle in handles:
        handle.wait(30)
    assert [(tmp_path / name).read_bytes() for name in ("a.zip", "b.zip")] == wants


@pytest.mark.parametrize("where", ["writer", "barrier"])
def test_a_failed_copy_fails_the_save_and_leaves_no_shadow(where, tmp_path, caplog, gate):
    model = make("replay")
    model.learn(20)
    held = gate(after=2, fail_writer=where == "writer", fail_barrier=where == "barrier")
    handle = background(model, tmp_path / "bg.zip")
    held.wait_held()
    model.learn(12, reset_num_timesteps=False)  # training goes on whatever the barrier met
    assert model.replay_buffer.pos == 32
    held.open()
    with pytest.raises(MemoryError, match="no room"):
        handle.wait(30)
    assert not (tmp_path / "bg.zip").exists()
    assert own_methods() == ORIGINAL and not _snapshot._watchers
    held.remove()
    snapshots(caplog)
    model.learn(5, reset_num_timesteps=False)
    background(model, tmp_path / "bg.zip").wait(30)
    assert snapshots(caplog) == ["full"]  # the half-filled shadow was not trusted
    assert (tmp_path / "bg.zip").read_bytes() == plain_bytes(model, tmp_path)


def test_a_copy_never_run_is_given_up(tmp_path, caplog, monkeypatch):
    model = make("replay")
    model.learn(20)
    source = _snapshot.replay_snapshot(model, model.replay_buffer)
    arrays = [("observations", model.replay_buffer.observations)]
    _, let_go, fill = _shadow.take(source, arrays, [])
    assert fill is not None and type(model.replay_buffer) in watched()
    let_go()  # as a save that fails before its writer starts
    assert not watched()
    _, let_go, fill = _shadow.take(source, arrays, [])
    assert snapshots(caplog) == ["full", "full"]  # the shadow never filled matched nothing
    fill()
    let_go()
    assert not watched()
    _, let_go, fill = _shadow.take(source, arrays, [])
    assert snapshots(caplog) == ["incremental"]  # filled once run
    fill()
    let_go()

    class NoWriters:  # no writer thread takes the save (none can be started)
        def submit(self, *args):
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(_background, "_writers", NoWriters)
    model.learn(40, reset_num_timesteps=False)
    with pytest.raises(RuntimeError, match="new thread"):
        background(model, tmp_path / "bg.zip")
    monkeypatch.undo()
    assert not watched() and not _snapshot._watchers


def test_the_barrier_reports_the_rows_each_method_writes():
    model = make("nstep")
    model.learn(20)
    buffer = model.replay_buffer
    seen = []
    unwatch = _snapshot._watch(buffer, seen.append)
    pos = buffer.pos
    obs = np.zeros((1, *buffer.obs_shape), np.float32)
    buffer.add(obs, obs, np.zeros((1, 2)), np.zeros(1), np.zeros(1), [{}])
    buffer.sample(4)  # NStepReplayBuffer flips `timeouts[pos - 1]` while it samples
    unwatch()
    unwatch()  # once is enough
    assert seen == [(pos,), (pos,)]
    buffer.add(obs, obs, np.zeros((1, 2)), np.zeros(1), np.zeros(1), [{}])
    assert len(seen) == 2 and own_methods() == ORIGINAL

    model = make("her")
    model.learn(23)  # inside an episode
    buffer = model.replay_buffer
    unwatch = _snapshot._watch(buffer, seen.append)
    with pytest.warns(UserWarning, match="last trajectory"):
        buffer.truncate_last_trajectory()
    unwatch()
    assert seen[-1] == ((buffer.pos - 1) % buffer.buffer_size,)

    model = make("optimize_memory_usage")
    model.learn(20)
    buffer = model.replay_buffer
    unwatch = _snapshot._watch(buffer, seen.append)
    model.learn(1, reset_num_timesteps=False)
    unwatch()
    assert (20, 21) in seen


@pytest.mark.parametrize("kind", ["replay", "dict", "her"])
def test_a_save_without_incremental_copies_in_the_background_and_keeps_nothing(kind, tmp_path, caplog, gate):
    """``background=True`` alone: the buffer's copy is made by the writer behind the barrier too
    (the call does not wait for it), is the buffer at the call, and is given back once written:
    the next save copies in full again, and no shadow or watch is left."""
    model = make(kind)
    model.learn(20)
    for i, steps in enumerate([37, 12]):
        held = gate(after=2)
        path = tmp_path / f"plain{i}.zip"
        handle = zipsave.save(model, path, include=["replay_buffer"], background=True)
        want = plain_bytes(model, tmp_path)
        held.wait_held()
        model.learn(steps, reset_num_timesteps=False)
        assert held.by_barrier > 0
        held.open()
        handle.wait(30)
        assert path.read_bytes() == want, f"save {i}"
        assert not _shadow._shadows and not _snapshot._watchers
    assert snapshots(caplog) == ["full", "full"]


def test_an_incremental_and_a_plain_save_of_one_buffer_in_flight_together(tmp_path, gate):
    """Two barriers on one buffer (the kept shadow's and a plain save's own): each archive is
    the buffer at its call."""
    model = make("replay")
    model.learn(20)
    held = gate(after=1)
    first = background(model, tmp_path / "inc.zip")
    want_first = plain_bytes(model, tmp_path, "a.zip")
    held.wait_held()
    model.learn(9, reset_num_timesteps=False)
    second = zipsave.save(model, tmp_path / "own.zip", include=["replay_buffer"], background=True)
    want_second = plain_bytes(model, tmp_path, "b.zip")
    model.learn(23, reset_num_timesteps=False)
    held.open()
    first.wait(30)
    second.wait(30)
    assert (tmp_path / "inc.zip").read_bytes() == want_first
    assert (tmp_path / "own.zip").read_bytes() == want_second
    assert len(_shadow._shadows) == 1  # the incremental save's, kept; the plain save's is gone
