"""The shape of a value the restricted unpickler builds: what a pickle's memo can make of it (an
object holding the one below twice, 60 levels deep, in a few hundred bytes; an object inside
itself; nesting thousands deep) is refused where the value is built, before ``repr``, ``==`` or
a walk (``zipsave diff``, SB3's note on a saved ``env``) could spend 2**61 steps on it. The
sharing real values hold (one config under several keys, a space repeated in a ``Tuple``, a
million ``{}`` infos of a HER buffer) loads as pickle gives it."""

from __future__ import annotations

import argparse
import base64
import collections
import json
import pickle
import subprocess
import sys
import types
import zipfile

import numpy as np
import pytest

import zipsave
from zipsave._invariants import MAX_TREE_DEPTH, check_structure
from zipsave._trust import TrustPolicy, restricted_loads


def _object_array(*items):
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


#: Every allowlisted kind of object ``repr`` or ``==`` walks into, holding the one below twice.
TWICE = {
    "list": lambda x: [x, x],
    "tuple": lambda x: (x, x),
    "dict": lambda x: {"a": x, "b": x},
    "deque": lambda x: collections.deque([x, x]),
    "OrderedDict": lambda x: collections.OrderedDict(a=x, b=x),
    "SimpleNamespace": lambda x: types.SimpleNamespace(a=x, b=x),
    "Namespace": lambda x: argparse.Namespace(a=x, b=x),
    "slice": lambda x: slice(x, x, None),
    "object_array": lambda x: _object_array(x, x),
    "structured_array": lambda x: _record(x, x),
}


def _record(a, b):
    out = np.empty(1, dtype=[("a", object), ("b", object)])
    out[0] = (a, b)
    return out


def _doubling(kind: str, levels: int) -> bytes:
    value: object = 0
    for _ in range(levels):
        value = TWICE[kind](value)
    return pickle.dumps(value, protocol=4)  # the memo writes each level once


@pytest.mark.parametrize("kind", sorted(TWICE))
def test_a_value_whose_paths_double_at_each_level_is_refused(kind):
    raw = _doubling(kind, 60)
    assert len(raw) < 6000  # a few KB
    with pytest.raises(zipsave.ArchiveLimitError, match=r"would visit \d{18,}") as caught:
        restricted_loads(raw, TrustPolicy(), key="evil", member="data")
    assert caught.value.key == "evil" and caught.value.member == "data"


@pytest.mark.parametrize("kind", ["list", "dict", "SimpleNamespace", "deque"])
def test_a_value_inside_itself_is_refused(kind):
    make = {
        "list": lambda: [],
        "dict": lambda: {},
        "SimpleNamespace": types.SimpleNamespace,
        "deque": collections.deque,
    }[kind]
    value = make()
    if isinstance(value, list | collections.deque):
        value.append(value)
    elif isinstance(value, dict):
        value["self"] = value
    else:
        value.me = value
    with pytest.raises(zipsave.ArchiveFormatError, match="contains itself"):
        restricted_loads(pickle.dumps(value, protocol=4), TrustPolicy())


def test_nesting_past_the_depth_limit_is_refused_and_within_it_loads():
    deep = b"\x80\x02" + b"]" * 100_000 + b"a" * 99_999 + b"."
    with pytest.raises(zipsave.ArchiveFormatError, match=f"deeper than {MAX_TREE_DEPTH} levels"):
        restricted_loads(deep, TrustPolicy())
    value: object = 1
    for _ in range(MAX_TREE_DEPTH):
        value = [value]
    assert restricted_loads(pickle.dumps(value, protocol=4), TrustPolicy()) == value
    with pytest.raises(zipsave.ArchiveFormatError, match=f"deeper than {MAX_TREE_DEPTH} levels"):
        restricted_loads(pickle.dumps([value], protocol=4), TrustPolicy())


def test_the_sharing_real_values_hold_loads():
    from gymnasium.spaces import Dict, Discrete, Tuple

    config = {"lr": 3e-4, "betas": (0.9, 0.999)}
    values = [
        {"a": config, "b": config, "groups": [config] * 1000},
        Tuple([Discrete(2)] * 1000),
        Dict({"a": Tuple([Discrete(3)] * 10), "b": Discrete(3)}),
        np.array([[{} for _ in range(2)] for _ in range(100_000)]),  # a HER buffer's infos
        collections.deque([{"r": 1.0, "l": 5, "t": 0.1}] * 100, maxlen=100),  # ep_info_buffer
        [list(range(1000))] * 200,  # 200 000 visits: under the floor
    ]
    for value in values:
        assert type(restricted_loads(pickle.dumps(value, protocol=4), TrustPolicy())) is type(value)


def test_check_structure_of_objects_counts_what_a_walk_reaches():
    # An instance's attributes are below it, as a list's items are: 300 references to one
    # namespace of 1 000 items are 1 301 values and 300 601 visits.
    shared = types.SimpleNamespace(items=list(range(1000)))
    assert check_structure([shared] * 100, objects=True) is not None  # 100 201 visits: under the floor
    with pytest.raises(zipsave.ArchiveLimitError, match="walking its 1301 values would visit 300601"):
        check_structure([shared] * 300, objects=True)
    assert check_structure([shared] * 300) is not None  # a tensor tree's walk stops at objects


def _archive(path, entries: dict) -> str:
    """A small zipsave archive with ``entries`` added to its ``data`` (no manifest)."""
    zipsave.save({"lr": 0.1}, path)
    with zipfile.ZipFile(path) as z:
        items = {n: z.read(n) for n in z.namelist() if n != "manifest.json"}
    data = json.loads(items["data"])
    data.update(entries)
    items["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, raw in items.items():
            z.writestr(name, raw)
    return str(path)


def _pickled(raw: bytes) -> dict:
    return {":type:": "<class 'list'>", ":serialized:": base64.b64encode(raw).decode()}


def _run(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter: a walk of 2**61 paths hangs it (and grows its memory)
    rather than failing, so the test gets a timeout, not a hung suite."""
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the door did not finish: it walked every path of the shared value")


def test_diff_of_shared_values_finishes(tmp_path):
    # Two archives whose `evil` pickles differ in their bytes: diff decodes both and compares
    # them (same_value walks every path) and prints the decoded value (its repr doubles).
    raw = _doubling("list", 60)
    a = _archive(tmp_path / "a.zip", {"evil": _pickled(raw)})
    b = _archive(tmp_path / "b.zip", {"evil": _pickled(raw.replace(b"\x80\x04", b"\x80\x03", 1))})
    out = _run(f"import sys; from zipsave import cli; sys.exit(cli.main(['diff', {a!r}, {b!r}]))")
    assert out.returncode == 1, out.stderr[-2000:]  # 1: they differ
    assert "evil" in out.stdout


def test_sb3_load_of_a_shared_env_value_finishes(tmp_path):
    pytest.importorskip("stable_baselines3")
    code = f"""
import json, zipfile, warnings
import stable_baselines3 as sb3
import zipsave, zipsave.sb3
model = sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
path = {str(tmp_path / "ppo.zip")!r}
zipsave.save(model, path)
with zipfile.ZipFile(path) as z:
    items = {{n: z.read(n) for n in z.namelist() if n != "manifest.json"}}
data = json.loads(items["data"])
data["env"] = {_pickled(_doubling("SimpleNamespace", 60))!r}
items["data"] = json.dumps(data).encode()
with zipfile.ZipFile(path, "w") as z:
    for name, raw in items.items():
        z.writestr(name, raw)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    loaded = zipsave.load(path, cls=sb3.PPO, device="cpu")
assert loaded.env is None
assert any("skipped key `env`" in str(w.message) for w in caught), [str(w.message) for w in caught]
"""
    out = _run(code)
    assert out.returncode == 0, out.stderr[-2000:]
