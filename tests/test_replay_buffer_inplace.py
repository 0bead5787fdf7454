"""Restoring a replay buffer into a live model reads the saved arrays straight into the live
buffer's own arrays (no second copy of the buffer); arrays that cannot hold them are replaced;
a member that fails after the live arrays were partly overwritten leaves the buffer empty."""

from __future__ import annotations

import json
import re
import sys
import zipfile

import numpy as np
import pytest

import zipsave

pytest.importorskip("stable_baselines3")  # the `test` extra installs it
if not sys.platform.startswith("linux"):
    pytest.skip("the mapping checks read /proc/self/maps", allow_module_level=True)

from stable_baselines3 import DQN  # noqa: E402
from test_replay_buffer_io import (  # noqa: E402
    _arrays,
    _data_offset,
    _her,
    _is_mapped,
    _model,
    _observations_member,
    _random_fill,
    _same_buffer,
    _saved_model,
    _truncated_copy,
)


def _live(kind, seed=5):
    """A model whose buffer holds other data than the saved one, as a run being resumed has."""
    if kind == "her":
        model = _her()
        model.replay_buffer.observations["observation"][:] ^= 1  # other frames than the saved run's
        return model
    model = _model(kind)
    _random_fill(model.replay_buffer, seed=seed)
    model.replay_buffer.pos, model.replay_buffer.full = 3, False
    return model


def _pointers(buffer):
    return {name: arr.__array_interface__["data"][0] for name, arr in _arrays(buffer).items()}


@pytest.mark.parametrize("kind", ["replay", "dict", "optimize_memory_usage", "nstep", "qrdqn", "her"])
def test_restore_reads_into_the_live_arrays(kind, tmp_path_factory):
    saved, path = _saved_model(kind, tmp_path_factory)
    live = _live(kind)
    before = _pointers(live.replay_buffer)
    zipsave.restore(live, path, device="cpu")
    assert _pointers(live.replay_buffer) == before  # the same memory, now holding the saved buffer
    _same_buffer(live.replay_buffer, saved.replay_buffer)  # (a live HER model's episode under way goes on)
    live.replay_buffer.sample(8)


def test_load_replay_buffer_door_reads_in_place(installed, tmp_path_factory):
    saved, path = _saved_model("replay", tmp_path_factory)
    live = _live("replay")
    before = _pointers(live.replay_buffer)
    live.load_replay_buffer(path)
    assert _pointers(live.replay_buffer) == before
    _same_buffer(live.replay_buffer, saved.replay_buffer)


def test_load_builds_fresh_arrays_instead(tmp_path_factory):
    """``load(cls=...)`` replaces the new model's untouched zeros (never made resident)."""
    saved, path = _saved_model("replay", tmp_path_factory)
    loaded = zipsave.load(path, cls=DQN, device="cpu")
    assert not loaded.replay_buffer.observations.flags.owndata  # zipsave's own mapping, not numpy's zeros
    _same_buffer(loaded.replay_buffer, saved.replay_buffer)


def test_a_buffer_of_another_size_is_refused_and_left_alone(tmp_path_factory):
    _, path = _saved_model("replay", tmp_path_factory)
    live = DQN("MlpPolicy", _model("replay").get_env(), buffer_size=500, device="cpu", policy_kwargs={"net_arch": [8]})
    _random_fill(live.replay_buffer, seed=3)
    kept = {name: arr.copy() for name, arr in _arrays(live.replay_buffer).items()}
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("buffer_size=1000, but the model's has 500")):
        zipsave.restore(live, path, device="cpu")
    assert (live.replay_buffer.pos, live.replay_buffer.full) == (7, True)
    for name, arr in _arrays(live.replay_buffer).items():
        assert np.array_equal(arr, kept[name]), name


def test_the_door_replaces_a_buffer_of_another_size(installed, tmp_path_factory):
    saved, path = _saved_model("replay", tmp_path_factory)
    live = DQN("MlpPolicy", _model("replay").get_env(), buffer_size=500, device="cpu", policy_kwargs={"net_arch": [8]})
    live.load_replay_buffer(path)  # as SB3's door: the saved buffer, whatever the model's size
    _same_buffer(live.replay_buffer, saved.replay_buffer)


def test_arrays_that_cannot_hold_the_saved_ones_are_replaced(tmp_path_factory, tmp_path):
    saved, path = _saved_model("replay", tmp_path_factory)
    live = _live("replay")
    buffer = live.replay_buffer
    frozen = buffer.observations
    frozen.flags.writeable = False
    mapped = np.memmap(tmp_path / "rewards.bin", dtype=buffer.rewards.dtype, mode="w+", shape=buffer.rewards.shape)
    mapped[:] = 9
    buffer.rewards = mapped
    buffer.dones = buffer.timeouts[...]  # one memory, two attributes
    shared = buffer.dones.__array_interface__["data"][0]
    actions = buffer.actions.__array_interface__["data"][0]
    zipsave.restore(live, path, device="cpu")
    _same_buffer(buffer, saved.replay_buffer)
    assert buffer.observations is not frozen and (frozen == _live("replay").replay_buffer.observations).all()
    assert buffer.rewards is not mapped and (np.memmap(tmp_path / "rewards.bin", dtype=mapped.dtype) == 9).all()
    assert buffer.dones.__array_interface__["data"][0] != shared
    assert buffer.actions.__array_interface__["data"][0] == actions  # the others still in place


def test_restore_mmap_still_maps(tmp_path_factory):
    saved, path = _saved_model("replay", tmp_path_factory)
    live = _live("replay")
    zipsave.restore(live, path, mmap=True, device="cpu")
    assert _is_mapped(live.replay_buffer.observations, path)
    _same_buffer(live.replay_buffer, saved.replay_buffer)


def _flip_last_byte(saved, member, tmp_path):
    path = tmp_path / "bad.zip"
    path.write_bytes(saved.read_bytes())
    start, size = _data_offset(path, member)
    with open(path, "r+b") as f:
        f.seek(start + size - 1)
        byte = f.read(1)
        f.seek(start + size - 1)
        f.write(bytes([byte[0] ^ 0x01]))
    return path


def _member_of(path, name):
    with zipfile.ZipFile(path) as zf:
        arrays = json.loads(zf.read("replay_buffer/data"))["arrays"][":zipsave:"]["value"]
    return arrays[name][":zipsave:"]["member"]


@pytest.mark.parametrize("skip", [False, True], ids=["raises", "skip_broken_tensors"])
def test_a_corrupt_member_read_in_place_empties_the_buffer(skip, tmp_path_factory, tmp_path):
    _, saved = _saved_model("replay", tmp_path_factory)
    member = _observations_member(saved)
    bad = _flip_last_byte(saved, member, tmp_path)
    live = _live("replay")
    live.replay_buffer.pos, live.replay_buffer.full = 5, True
    if skip:
        with pytest.warns(zipsave.SkippedEntryWarning, match="the buffer was emptied"):
            zipsave.restore(live, bad, device="cpu", skip_broken_tensors=True)
    else:
        with pytest.raises(
            zipsave.IntegrityError, match=re.escape("the buffer was emptied (pos=0, full=False)")
        ) as err:
            zipsave.restore(live, bad, device="cpu")
        assert err.value.member == member and "CRC-32" in str(err.value)
        assert err.value.expected != err.value.found
    assert (live.replay_buffer.pos, live.replay_buffer.full) == (0, False)
    with pytest.raises(ValueError):
        live.replay_buffer.sample(4)  # nothing to sample from: SB3 refuses an empty buffer


def test_a_corrupt_her_member_empties_the_episodes_too(tmp_path_factory, tmp_path):
    _, saved = _saved_model("her", tmp_path_factory)
    member = _member_of(saved, "actions")
    bad = _flip_last_byte(saved, member, tmp_path)
    live = _live("her")
    assert live.replay_buffer.ep_length.any()
    with pytest.raises(zipsave.IntegrityError, match=re.escape(f"member `{member}`")):
        zipsave.restore(live, bad, device="cpu")
    buffer = live.replay_buffer
    assert (buffer.pos, buffer.full) == (0, False)
    assert not buffer.ep_length.any() and not buffer.ep_start.any() and not buffer._current_ep_start.any()


def test_a_corrupt_her_bookkeeping_member_is_found_before_the_live_buffer_changes(tmp_path_factory, tmp_path):
    # the episode bookkeeping is read (and checked) before anything is read in place
    _, saved = _saved_model("her", tmp_path_factory)
    member = _member_of(saved, "ep_length")
    bad = _flip_last_byte(saved, member, tmp_path)
    live = _live("her")
    kept = {name: arr.copy() for name, arr in _arrays(live.replay_buffer).items()}
    pos = live.replay_buffer.pos
    with pytest.raises(zipsave.IntegrityError, match=re.escape(f"member `{member}`")):
        zipsave.restore(live, bad, device="cpu")
    assert live.replay_buffer.pos == pos
    for name, arr in _arrays(live.replay_buffer).items():
        assert np.array_equal(arr, kept[name]), name


def test_a_truncated_member_is_found_before_the_live_buffer_changes(tmp_path_factory, tmp_path):
    _, saved = _saved_model("replay", tmp_path_factory)
    member = _observations_member(saved)
    path = _truncated_copy(saved, member, tmp_path / "short.zip")
    live = _live("replay")
    kept = {name: arr.copy() for name, arr in _arrays(live.replay_buffer).items()}
    with pytest.raises(zipsave.ZipsaveError, match=re.escape(member)):
        zipsave.restore(live, path, device="cpu")
    assert (live.replay_buffer.pos, live.replay_buffer.full) == (3, False)  # its headers were checked first
    for name, arr in _arrays(live.replay_buffer).items():
        assert np.array_equal(arr, kept[name]), name


def test_a_member_is_read_only_into_an_array_that_can_hold_it(tmp_path_factory):
    from zipsave._archive import ArchiveSource
    from zipsave._tensors import read_array_header, read_array_member_into

    saved, path = _saved_model("replay", tmp_path_factory)
    member = _member_of(path, "actions")
    source = ArchiveSource(path)
    try:
        header = read_array_header(source.reader, member)
        assert (header.shape, header.dtype) == (saved.replay_buffer.actions.shape, saved.replay_buffer.actions.dtype)
        dest = np.zeros(header.shape, header.dtype)
        read_array_member_into(source.reader, member, dest)
        assert np.array_equal(dest, saved.replay_buffer.actions)
        for wrong in (np.zeros(header.shape, np.float64), np.zeros((*header.shape, 2), header.dtype)[..., 0]):
            with pytest.raises(zipsave.DecodeError, match=re.escape(f"array member `{member}` holds {header.dtype}")):
                read_array_member_into(source.reader, member, wrong)
        with pytest.raises(zipsave.DecodeError, match=re.escape("array (not C-contiguous).")):
            read_array_member_into(source.reader, member, np.zeros((*header.shape, 2), header.dtype)[..., 0])
        dest.flags.writeable = False
        with pytest.raises(zipsave.DecodeError, match=re.escape("array (read-only).")):
            read_array_member_into(source.reader, member, dest)
    finally:
        source.close()
