"""The copies of a background save's tensors: an incremental save copies them into the memory
the last one kept (no page faults in the training thread), never into memory a save still
writes from, and the archive is the state at the call either way."""

from __future__ import annotations

import pytest
import torch
from test_background import GatedFile, Holder, state, train

import zipsave
from zipsave._tensors import _copies, copy_storages


@pytest.fixture(autouse=True)
def nothing_kept():
    zipsave.release_snapshots()
    yield
    zipsave.release_snapshots()


def kept() -> list:
    return list(_copies._kept)


def changed_after_the_call(algo) -> None:
    train(algo.policy, 2)
    with torch.no_grad():
        for p in algo.policy.parameters():
            p.add_(1.0)
        algo.log_ent_coef.add_(5.0)


def test_an_incremental_save_copies_into_the_memory_the_last_one_kept(tmp_path):
    algo = Holder(width=512)  # 3 MB of parameters and Adam moments: over COPY_MIN
    train(algo.policy)
    zipsave.save(algo, tmp_path / "first.zip", background=True, incremental=True).wait()
    (arena,) = kept()
    assert len(arena) >= 3 << 20

    train(algo.policy)
    zipsave.save(algo, tmp_path / "plain.zip")
    saved = state(algo.policy)
    target = GatedFile()
    handle = zipsave.save(algo, target, background=True, incremental=True)
    assert kept() == []  # taken by this save while it writes
    changed_after_the_call(algo)
    target.gate.set()
    handle.wait(timeout=60)
    assert kept() == [arena]  # given back once the save has written, for the next one
    assert target.getvalue() == (tmp_path / "plain.zip").read_bytes()
    target.seek(0)
    loaded = zipsave.load(target)
    assert all(torch.equal(v, saved[k]) for k, v in loaded.policy.state_dict().items())


def test_memory_a_save_still_writes_from_is_not_reused(tmp_path):
    algo = Holder(width=512)
    train(algo.policy)
    first = GatedFile()
    zipsave.save(algo, tmp_path / "first-plain.zip")
    slow = zipsave.save(algo, first, background=True, incremental=True)
    changed_after_the_call(algo)
    zipsave.save(algo, tmp_path / "second-plain.zip")
    fast = zipsave.save(algo, tmp_path / "second.zip", background=True, incremental=True)
    changed_after_the_call(algo)
    fast.wait(timeout=60)
    assert len(kept()) == 1  # the second save's memory; the first one's is still in use
    third = zipsave.save(algo, tmp_path / "third.zip", background=True, incremental=True)
    third.wait(timeout=60)
    first.gate.set()
    slow.wait(timeout=60)
    assert len(kept()) == _copies.KEEP
    assert first.getvalue() == (tmp_path / "first-plain.zip").read_bytes()
    assert (tmp_path / "second.zip").read_bytes() == (tmp_path / "second-plain.zip").read_bytes()


def test_release_snapshots_gives_the_kept_memory_back(tmp_path):
    algo = Holder(width=512)
    zipsave.save(algo, tmp_path / "bg.zip", background=True, incremental=True).wait()
    (arena,) = kept()
    assert zipsave.release_snapshots() >= len(arena)
    assert kept() == [] and zipsave.release_snapshots() == 0


def test_a_save_that_is_not_incremental_keeps_nothing(tmp_path):
    algo = Holder(width=512)
    zipsave.save(algo, tmp_path / "plain.zip")
    zipsave.save(algo, tmp_path / "bg.zip", background=True).wait()
    assert kept() == []
    assert (tmp_path / "bg.zip").read_bytes() == (tmp_path / "plain.zip").read_bytes()


def test_copies_are_their_own_memory_side_by_side():
    sources = [torch.arange(300_000, dtype=torch.float32), torch.zeros(0), torch.arange(7, dtype=torch.int8)]
    storages = [t.untyped_storage() for t in sources]
    copies = copy_storages(storages, keep=True)
    assert [bytes(c) for c in copies] == [bytes(s) for s in storages]
    assert all(c.data_ptr() % 64 == 0 for c in copies if c.nbytes())
    sources[0].add_(1)  # the copy does not follow its source
    assert bytes(copies[0]) != bytes(storages[0])
    assert kept() == []
    del copies
    assert len(kept()) == 1  # the last copy freed: its memory is kept for the next save


def test_small_copies_are_plain_clones():
    storage = torch.arange(10.0).untyped_storage()
    (copy,) = copy_storages([storage], keep=True)
    assert bytes(copy) == bytes(storage) and copy.data_ptr() != storage.data_ptr()
    del copy
    assert kept() == []
