"""A restore that reads into a driver-side learner's live tensors and meets a broken member:
the live learner is left exactly as it was (every byte of its module, optimizer and EnvRunner),
whichever member is broken and wherever in it. Every member to be read in place is checked
before a live byte changes; with ``skip_broken_tensors=True`` the broken part is left out whole
and keeps its live values, never half written."""

from __future__ import annotations

import re
import shutil
import zipfile

import numpy as np
import pytest
import rllib_helpers
import torch
from conftest import FILTER_WARNINGS

import zipsave
from zipsave._core._session import LoadSession

pytestmark = [pytest.mark.filterwarnings(w) for w in FILTER_WARNINGS]
OPTIMIZER = "default_policy_default_optimizer"
LEARNER = "learner_group/learner"
MODULE_PTH = f"{LEARNER}/rl_module/default_policy/module.pth"
ARRAY = f"{LEARNER}/arrays/2.npy"  # not the first: arrays before it would be read in place first
WHERE = ["first", "middle", "last"]  # the first byte of a .npy is its header's magic


def _config(seed):
    # Two hidden layers of 512: the moments of the 512x512 weights are `arrays/*.npy` members, and
    # module.pth is over 1 MiB (a smaller one is read whole and checked before a byte is used).
    return (
        rllib_helpers.ppo_config(filtered=False, seed=seed)
        .env_runners(num_env_runners=0)
        .rl_module(model_config={"fcnet_hiddens": [512, 512]})
    )


@pytest.fixture(scope="module")
def saved(ray_session, tmp_path_factory):
    algo = _config(0).build_algo()
    try:
        algo.train()
        path = tmp_path_factory.mktemp("in_place_broken") / "ppo.zip"
        zipsave.save(algo, path)
        yield path, _live(algo)
    finally:
        algo.stop()


@pytest.fixture(scope="module")
def victim(ray_session):
    """One algorithm for every test: each snapshots it first and moves it on with a training
    step, so it never holds the saved state when a test begins."""
    algo = _config(1).build_algo()
    yield algo
    algo.stop()


def _clone(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clone(v) for v in value]
    return value


def _live(algo):
    """Every live value a restore could change: the learner's module and optimizer state and
    the EnvRunner's module, copied."""
    learner = algo.learner_group._learner
    return _clone(
        {
            "module": learner.module["default_policy"].state_dict(),
            "optimizer": learner._named_optimizers[OPTIMIZER].state_dict(),
            "env_runner": algo.env_runner.module.state_dict(),
        }
    )


def _same_bytes(a, b, where=""):
    """``a`` and ``b`` hold the same values, tensors compared byte for byte."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a, key=str) == sorted(b, key=str), where
        for key in a:
            _same_bytes(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same_bytes(x, y, f"{where}/{i}")
    else:
        assert a == b, where


def _corrupt(path, out, member, where):
    """A copy of the archive with one byte of ``member`` flipped (its first, middle or last),
    the zip directory (CRC-32 and all) left as saved: the damage shows only in its bytes."""
    shutil.copy(path, out)
    with zipfile.ZipFile(out) as z:
        info = z.getinfo(member)
    offset = {"first": 0, "middle": info.file_size // 2, "last": info.file_size - 1}[where]
    with open(out, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = np.frombuffer(f.read(4), dtype="<u2")
        f.seek(info.header_offset + 30 + int(name_len) + int(extra_len) + offset)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ 0xFF]))
    return out


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("member", [MODULE_PTH, ARRAY])
def test_a_broken_member_leaves_the_live_learner_as_it_was(saved, victim, tmp_path, member, where):
    path, _ = saved
    broken = _corrupt(path, tmp_path / "broken.zip", member, where)
    victim.train()
    before = _live(victim)
    with pytest.raises(zipsave.IntegrityError, match=re.escape(f"member `{member}`")) as caught:
        zipsave.restore(victim, broken)
    assert "partly overwritten" not in str(caught.value)
    _same_bytes(_live(victim), before)
    victim.train()  # and it trains on


def test_strict_fails_before_a_live_byte_changes(saved, victim, tmp_path):
    path, _ = saved
    broken = _corrupt(path, tmp_path / "broken.zip", ARRAY, "middle")
    victim.train()
    before = _live(victim)
    with pytest.raises(zipsave.IntegrityError, match=re.escape(f"member `{ARRAY}`")):
        zipsave.restore(victim, broken, strict=True)
    _same_bytes(_live(victim), before)


def test_the_error_names_what_to_leave_out_and_leaving_it_out_restores_the_rest(saved, victim, tmp_path):
    path, expected = saved
    broken = _corrupt(path, tmp_path / "broken.zip", ARRAY, "middle")
    with pytest.raises(zipsave.IntegrityError) as caught:
        zipsave.restore(victim, broken)
    assert f"`exclude=['{LEARNER}/optimizer']`" in str(caught.value)
    victim.train()
    own = _live(victim)["optimizer"]
    zipsave.restore(victim, broken, exclude=[f"{LEARNER}/optimizer"])
    after = _live(victim)
    _same_bytes(after["optimizer"], own)
    _same_bytes(after["module"], expected["module"])


@pytest.mark.parametrize("where", WHERE)
def test_skip_broken_tensors_leaves_a_broken_optimizer_array_out_whole(saved, victim, tmp_path, where):
    path, expected = saved
    broken = _corrupt(path, tmp_path / "broken.zip", ARRAY, where)
    victim.train()
    before = _live(victim)
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape(ARRAY)):
        zipsave.restore(victim, broken, skip_broken_tensors=True, report=report)
    assert [(e.member, e.key) for e in report.skipped] == [(f"{LEARNER}/data", "optimizer")]
    after = _live(victim)
    _same_bytes(after["optimizer"], before["optimizer"])  # its own moments, every one
    _same_bytes(after["module"], expected["module"])
    _same_bytes(after["env_runner"], {k: expected["module"][k] for k in after["env_runner"]})
    victim.train()


@pytest.mark.parametrize("where", WHERE)
def test_skip_broken_tensors_leaves_a_broken_module_out_whole(saved, victim, tmp_path, where):
    path, expected = saved
    broken = _corrupt(path, tmp_path / "broken.zip", MODULE_PTH, where)
    victim.train()
    before = _live(victim)
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape(MODULE_PTH)):
        zipsave.restore(victim, broken, skip_broken_tensors=True, report=report)
    assert [e.member for e in report.skipped] == [f"{LEARNER}/rl_module/default_policy"]
    after = _live(victim)
    _same_bytes(after["module"], before["module"])  # its own weights, every one
    _same_bytes(after["env_runner"], {k: before["module"][k] for k in after["env_runner"]})
    _same_bytes(after["optimizer"], expected["optimizer"])
    victim.train()


def test_a_file_changed_between_the_check_and_the_read_is_reported(saved, victim, tmp_path, monkeypatch):
    """The check passed (here: skipped), then the bytes read into the live tensors are not the
    checked ones: the error says the learner may be partly overwritten, even under
    ``skip_broken_tensors=True``, and the optimizer being read is reset, not left mixed."""
    path, _ = saved
    broken = _corrupt(path, tmp_path / "broken.zip", ARRAY, "last")
    monkeypatch.setattr(LoadSession, "check_stored", lambda self, member: None)
    victim.train()
    for options in ({}, {"skip_broken_tensors": True}):
        with pytest.raises(zipsave.IntegrityError, match="may be partly overwritten") as caught:
            zipsave.restore(victim, broken, **options)
        assert f"member `{ARRAY}`" in str(caught.value)
        assert f"optimizer `{OPTIMIZER}` was reset" in str(caught.value)
        assert len(victim.learner_group._learner._named_optimizers[OPTIMIZER].state) == 0
        victim.train()


def test_a_state_dict_refused_before_its_first_byte_is_not_called_a_changed_file(saved, victim, monkeypatch):
    """``module.pth``'s bytes pass their check, then its reader refuses what they hold (here:
    its pickle, as a crafted member with matching checksums would be refused): nothing of the
    live learner was written, so the error is the refusal itself, not "the archive changed"
    and not "partly overwritten", and the learner is exactly as it was."""
    path, _ = saved
    import zipsave._tensors._pth_read as pth_read

    real = pth_read.read_pth_meta

    def refuse(view, limits=None):
        if getattr(view, "size", 0) > 1 << 20:  # module.pth only: the small members read as usual
            raise zipsave.ArchiveFormatError("`data.pkl` holds something a state dict does not.")
        return real(view, limits)

    monkeypatch.setattr(pth_read, "read_pth_meta", refuse)
    victim.train()
    before = _live(victim)
    with pytest.raises(zipsave.ArchiveFormatError, match="holds something a state dict does not") as caught:
        zipsave.restore(victim, path)
    assert "partly" not in str(caught.value) and "changed" not in str(caught.value)
    assert f"member `{MODULE_PTH}`" in str(caught.value)
    _same_bytes(_live(victim), before)
    victim.train()
