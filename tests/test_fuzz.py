"""Corrupt valid archives every which way and hold zipsave to its contract: a load either
gives back exactly what was saved (perhaps minus entries it skipped with a
SkippedEntryWarning), or raises a ZipsaveError. No other exception, no other warning, no
hang, and nothing that loads comes back different."""

from __future__ import annotations

import datetime
import io
import re
import signal
import warnings
import zipfile
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zipsave
from zipsave._tools import verify


def _state() -> dict[str, Any]:
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(policy.parameters())
    policy(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    return {
        "policy": policy,
        "optimizer": optimizer,
        "learning_rate": 3e-4,
        "net_arch": (8, 8),
        "observation_space": gym.spaces.Box(-1.0, 1.0, (4,), np.float32),
        "buffer": np.arange(9000, dtype=np.float64),  # 72 KB: an arrays/0.npy member
        "small": np.arange(5, dtype=np.int32),
        "log_ent_coef": torch.zeros(1),
        "names": {"a", "b"},
        "when": datetime.date(2020, 1, 1),
        "plain": {"nested": [1, 2.5, None, "x"]},
    }


STATE = _state()
EXPECTED = {k: (v.state_dict() if hasattr(v, "state_dict") else v) for k, v in STATE.items()}


def _archive() -> bytes:
    buf = io.BytesIO()
    zipsave.save(STATE, buf)
    return buf.getvalue()


RAW = _archive()
with zipfile.ZipFile(io.BytesIO(RAW)) as _zf:
    # Where the structure lives: member headers and the central directory are worth more
    # flips than the bulk of the array bytes.
    HOT = sorted({i.header_offset for i in _zf.infolist()} | {_zf.start_dir})


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@contextmanager
def time_limit(seconds: int):
    def fail(*_: Any) -> None:
        raise TimeoutError(f"a load took more than {seconds} s (a hang?)")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _repacked(raw: bytes) -> bytes:
    """The archive as a zip tool re-packs it: every member deflated, no alignment."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return out.getvalue()


DEFLATED = _repacked(RAW)

# The first load and verify of this process outside any alarm: an alarm that cuts a first import
# short would leave a half-made module behind for every later test.
zipsave.load(io.BytesIO(RAW))
verify(io.BytesIO(RAW))


def check_contract(raw: bytes) -> None:
    with time_limit(20), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = zipsave.load(io.BytesIO(raw))
        except zipsave.ZipsaveError:
            result = None
        problems = verify(io.BytesIO(raw))
    others = [w for w in caught if not issubclass(w.category, zipsave.ZipsaveWarning)]
    assert not others, [str(w.message) for w in others]
    assert isinstance(problems, list) and all(isinstance(p, str) for p in problems)
    if result is None:
        assert problems or raw not in (RAW, DEFLATED)
        return
    # What the warnings account for: skipped keys and members, and members the manifest
    # lists that the (damaged) directory no longer has.
    skipped = {
        w.message.entry.key or w.message.entry.member.removesuffix(".pth")
        for w in caught
        if issubclass(w.category, zipsave.SkippedEntryWarning)
    }
    skipped |= {
        m.removesuffix(".pth")
        for w in caught
        for m in re.findall(r"member `([^`]+)` is listed in manifest.json but missing", str(w.message))
    }
    for key, value in result.items():
        assert key in EXPECTED, f"`{key}` appeared from nowhere"
        assert same(EXPECTED[key], value), f"`{key}` loaded with a different value"
    manifest_lost = any("manifest.json is unreadable" in str(w.message) for w in caught)
    for key in set(EXPECTED) - set(result):
        # Without a manifest the archive no longer knows its own member list: a member whose
        # directory name was damaged is reported under the damaged name.
        assert key in skipped or (manifest_lost and skipped), f"`{key}` vanished without a warning naming it"
    if not problems:
        # Every byte verify checks is intact: the load must be complete and silent.
        assert not caught, [str(w.message) for w in caught]
        assert set(result) == set(EXPECTED)


@pytest.mark.parametrize("raw", [RAW, DEFLATED], ids=["as-saved", "deflated"])
def test_the_uncorrupted_archive_loads_completely(raw):
    check_contract(raw)
    assert verify(io.BytesIO(raw)) == []


_anywhere = st.integers(0, len(RAW) - 1)
_near_structure = st.builds(
    lambda base, delta: min(len(RAW) - 1, base + delta), st.sampled_from(HOT), st.integers(0, 120)
)
_tail = st.integers(max(0, len(RAW) - 2500), len(RAW) - 1)  # central directory, manifest
_position = st.one_of(_anywhere, _near_structure, _tail)
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(st.tuples(_position, st.integers(1, 255)), min_size=1, max_size=4))
def test_byte_flips(flips):
    raw = bytearray(RAW)
    for at, mask in flips:
        raw[at] ^= mask
    check_contract(bytes(raw))


@SETTINGS
@given(st.one_of(_anywhere, _tail, st.integers(0, 200)))
def test_truncations(length):
    check_contract(RAW[:length])


@SETTINGS
@given(_position, st.binary(min_size=1, max_size=64))
def test_inserted_bytes(at, extra):
    check_contract(RAW[:at] + extra + RAW[at:])


@SETTINGS
@given(_position, st.integers(1, 64))
def test_deleted_bytes(at, count):
    check_contract(RAW[:at] + RAW[at + count :])


@SETTINGS
@given(_position, st.binary(min_size=1, max_size=32))
def test_overwritten_ranges(at, junk):
    raw = bytearray(RAW)
    raw[at : at + len(junk)] = junk
    check_contract(bytes(raw[: len(RAW)]))


@pytest.mark.parametrize("member", ["data", "policy.pth", "optimizer.pth", "arrays/0.npy", "manifest.json"])
def test_every_byte_of_a_small_member_region(member):
    """Deterministic sweep: one flip at each of the first bytes of a member's header and data."""
    with zipfile.ZipFile(io.BytesIO(RAW)) as zf:
        start = zf.getinfo(member).header_offset
    for at in range(start, min(len(RAW), start + 160), 3):
        raw = bytearray(RAW)
        raw[at] ^= 0x5A
        check_contract(bytes(raw))


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, len(DEFLATED) - 1), st.integers(1, 255)), min_size=1, max_size=3))
def test_byte_flips_in_a_deflated_archive(flips):
    raw = bytearray(DEFLATED)
    for at, mask in flips:
        raw[at] ^= mask
    check_contract(bytes(raw))
