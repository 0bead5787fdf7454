"""Readers beside a running manager: a read-only view (``CheckpointManager(dir, read_only=True)``)
that lists, loads and restores while another process saves and prunes; waiting for the next
checkpoint; and a manager that lets its directory go (``release``) until its next save."""

from __future__ import annotations

import multiprocessing
import os
import re
import threading
import time

import pytest
import torch

import zipsave

_FORK = multiprocessing.get_context("fork")  # no fresh interpreter to import torch into


def _writer(directory: str) -> None:
    """Save and prune as fast as it can (keep_last=2) until killed."""
    with zipsave.CheckpointManager(directory, keep_last=2, background=False) as manager:
        for step in range(1, 10**9):
            manager.save(step, state(float(step)))
            time.sleep(0.002)


def state(value: float = 0.0) -> dict:
    return {"w": torch.full((64,), value), "b": torch.full((3,), value), "step": int(value)}


def test_a_read_only_view_restores_the_newest_exactly_while_a_writer_saves_and_prunes(tmp_path):
    directory = tmp_path / "run"
    zipsave.CheckpointManager(directory).close()  # so the view finds an index from the start
    writer = _FORK.Process(target=_writer, args=(str(directory),))
    writer.start()
    try:
        view = zipsave.CheckpointManager(directory, read_only=True)
        seen: list[int] = []
        # Until it has followed the writer through three checkpoints (however slowly a loaded
        # machine runs the writer) and restored at least 40 times; a dead writer ends it.
        while (len(seen) < 40 or len(set(seen)) < 3) and writer.is_alive():
            target = state(-1.0)
            checkpoint = view.restore_latest(target)
            if checkpoint is None:
                continue  # the writer has not saved yet
            step = checkpoint.step
            # every part from one and the same checkpoint: never torn, never mixed
            assert target["step"] == step
            assert torch.equal(target["w"], torch.full((64,), float(step)))
            assert torch.equal(target["b"], torch.full((3,), float(step)))
            seen.append(step)
        assert seen == sorted(seen) and len(set(seen)) > 1  # it followed the writer
        assert writer.is_alive()  # the writer ran all along, never stopped by a lock
    finally:
        writer.kill()
        writer.join()


def test_a_read_only_view_never_writes_nor_locks(tmp_path):
    with zipsave.CheckpointManager(tmp_path, keep_best=("score", "max"), background=False) as writer:
        writer.save(1, state(1.0), metrics={"score": 5})
        writer.save(2, state(2.0), metrics={"score": 3})
        before = sorted(os.listdir(tmp_path)), [os.stat(tmp_path / n).st_mtime_ns for n in sorted(os.listdir(tmp_path))]
        view = zipsave.CheckpointManager(tmp_path, read_only=True)  # while the writer holds the lock
        assert view.read_only and not writer.read_only
        assert [c.step for c in view.list()] == [1, 2] and view.latest().step == 2
        assert view.best("score", "max").step == 1
        target = state()
        assert view.restore_best(target, "score", "max").step == 1 and target["step"] == 1
        assert view.load_latest()["step"] == 2
        assert view.load_best("score")["step"] == 1
        with pytest.raises(zipsave.ZipsaveError, match=re.escape("was opened with read_only=True, so it cannot save")):
            view.save(3, state())
        writer.save(3, state(3.0), metrics={"score": 1})
        assert view.latest().step == 3  # the view reads the index afresh
        view.close()
    after = sorted(os.listdir(tmp_path))
    assert set(before[0]) <= set(after) and "step-0000000003.zip" in after


def test_a_read_only_view_of_a_directory_not_made_yet_is_empty(tmp_path):
    view = zipsave.CheckpointManager(tmp_path / "later", read_only=True)
    assert view.list() == [] and view.restore_latest(state()) is None
    assert view.wait_for_new(timeout=0) is None
    assert not (tmp_path / "later").exists()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(zipsave.CheckpointDirectoryError, match=re.escape("so it is not a checkpoint directory")):
        zipsave.CheckpointManager(tmp_path / "other", read_only=True)


def test_wait_for_new_returns_the_next_checkpoint_or_none_at_the_timeout(tmp_path):
    with zipsave.CheckpointManager(tmp_path, background=False) as writer:
        writer.save(5, state(5.0))
        view = zipsave.CheckpointManager(tmp_path, read_only=True)
        assert view.wait_for_new(timeout=0).step == 5
        assert view.wait_for_new(after_step=5, timeout=0.05, poll=0.01) is None

        later = threading.Timer(0.1, lambda: writer.save(9, state(9.0)))
        later.start()
        assert view.wait_for_new(after_step=5, timeout=30, poll=0.01).step == 9
        later.join()
        # 9 is listed already; 12 is saved only once 9 was yielded (saved sooner, it would be
        # passed over for the newest), while the iterator waits for it
        steps, latest = [], threading.Timer(0.1, lambda: writer.save(12, state(12.0)))
        for checkpoint in view.new_checkpoints(after_step=5, timeout=30, poll=0.01):
            steps.append(checkpoint.step)
            if checkpoint.step != 9:
                break
            latest.start()
        assert steps == [9, 12]
        latest.join()
        # and it stops once `timeout` passes without a new one
        assert list(view.new_checkpoints(after_step=12, timeout=0.05, poll=0.01)) == []
    with pytest.raises(ValueError, match=re.escape("`poll` must be a positive number of seconds")):
        view.wait_for_new(poll=0)


def test_release_lets_the_directory_go_until_the_next_save(tmp_path):
    manager = zipsave.CheckpointManager(tmp_path, background=True)
    manager.save(1, state(1.0))
    manager.release()
    assert [c.step for c in manager.list()] == [1]  # pending saves are done first
    other = zipsave.CheckpointManager(tmp_path, background=False)  # free now
    other.save(2, state(2.0))
    other.close()
    manager.save(3, state(3.0))  # takes the directory again, with the other's checkpoint listed
    manager.wait()
    assert [c.step for c in manager.list()] == [1, 2, 3]
    manager.close()


sb3 = pytest.importorskip("stable_baselines3")


def test_the_callback_lets_its_directory_go_when_learn_returns(tmp_path):
    from stable_baselines3 import PPO

    import zipsave.sb3

    model = PPO(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=32,
        batch_size=32,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )
    callback = zipsave.sb3.CheckpointCallback(tmp_path, every_steps=32)
    model.learn(64, callback=callback)
    with zipsave.CheckpointManager(tmp_path) as opened:  # no close() needed first
        assert [c.step for c in opened.list()] == [32, 64]
    loaded = zipsave.load(tmp_path / "step-0000000064.zip", cls=PPO)
    assert loaded.num_timesteps == 64
    model.learn(32, callback=callback, reset_num_timesteps=False)  # takes the directory again
    assert [c.step for c in callback.manager.list()] == [32, 64, 96]
    callback.close()


def test_a_released_manager_does_not_take_the_directory_from_a_newer_one(tmp_path):
    older = zipsave.CheckpointManager(tmp_path, background=False)
    older.save(1, state(1.0))
    older.release()
    newer = zipsave.CheckpointManager(tmp_path, background=False)
    with pytest.raises(
        zipsave.CheckpointLockedError, match=re.escape("another CheckpointManager object still has it open")
    ):
        older.save(2, state(2.0))
    newer.save(2, state(2.0))
    newer.close()
    older.save(3, state(3.0))  # free again
    assert [c.step for c in older.list()] == [1, 2, 3]
    older.close()
