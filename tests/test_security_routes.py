"""Routes from archive bytes to code that do not go through the unpickler: names read from an
archive used as attribute paths, class paths imported by name, classes SB3 later calls, spaces
SB3 compares, and errors that are not zipsave's (issue #27, items 1, 2, 3 and 7)."""

from __future__ import annotations

import io
import json
import pickle
import re
import sys
import zipfile

import numpy as np
import pytest
import torch

import zipsave
from zipsave._trust import TrustPolicy, _allowlist, restricted_loads, space_problem

HOSTILE_NAMES = [
    "__class__.__init__.__globals__.sys.modules.zipsave._trust._allowlist.CORE_ALLOWLIST",
    "__class__.__init__.__globals__.sys.modules.zipsave._trust._policy.TrustPolicy.is_trusted",
    "__dict__.x",
    "_zipsave_init_args",
    "training.__class__",
    "forward",  # a method of the class: code, not state
    "weight.data",  # a getset descriptor of torch.Tensor
    "_forward_hooks.0",  # torch's hook registry: forward() would call what is written there
]


def _rezip(path, changes):
    """Rewrite ``path`` with members replaced (bytes) or removed (None), without manifest.json:
    as a hand-made archive (SB3's have none), so hashes do not get in the way."""
    with zipfile.ZipFile(path) as zf:
        items = {n: zf.read(n) for n in zf.namelist()}
    items.pop("manifest.json", None)
    for name, raw in changes.items():
        if raw is None:
            items.pop(name, None)
        else:
            items[name] = raw
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in items.items():
            zf.writestr(name, raw)


@pytest.fixture
def trust_unchanged():
    before = (_allowlist.CORE_ALLOWLIST, _allowlist.default_allowlist(), TrustPolicy.__dict__["is_trusted"])
    yield
    assert (_allowlist.CORE_ALLOWLIST, _allowlist.default_allowlist(), TrustPolicy.__dict__["is_trusted"]) == before
    assert not TrustPolicy().is_trusted("os", "system")


@pytest.fixture
def marker_module(tmp_path, monkeypatch):
    """A module whose import writes a marker file: importing it is what must not happen."""
    name = f"zs_marker_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        f"open({str(tmp_path / 'IMPORTED')!r}, 'w').close()\n"
        "import zipsave\nclass Algo(zipsave.Saveable):\n    def __init__(self, x=1):\n        self.x = x\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


# -- item 1: names from an archive address only the object's own state -------------------------
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_loose_variable_names_never_leave_the_object(tmp_path, name, trust_unchanged):
    path = tmp_path / "a.zip"
    zipsave.save_archive(path, pytorch_variables={name: torch.zeros(1)})
    with pytest.raises(zipsave.UnsafeNameError, match=re.escape(f"key `{name}`")) as info:
        zipsave.restore(torch.nn.Linear(4, 2), path)
    assert info.value.member == "pytorch_variables.pth" and info.value.name == name


def test_legitimate_loose_variables_still_load(tmp_path):
    module = torch.nn.Linear(4, 2)
    module.register_buffer("steps", torch.zeros(3))
    zipsave.save_archive(tmp_path / "a.zip", pytorch_variables={"weight": torch.ones(2, 4), "steps": torch.ones(3)})
    zipsave.restore(module, tmp_path / "a.zip", exact_match=False)
    assert torch.equal(module.weight.detach(), torch.ones(2, 4)) and torch.equal(module.steps, torch.ones(3))


def test_pickle_free_legacy_registry_cannot_rewrite_the_trust_policy(tmp_path, trust_unchanged):
    # `_parameters` in data (archives before 0.2): a dict of names to values, in JSON only.
    target = "__class__.__init__.__globals__.sys.modules.zipsave._trust._policy.TrustPolicy.is_trusted"
    slice_ref = {":type:": "<class 'type'>", ":zipsave:": {"kind": "ref", "path": "builtins:slice"}}
    path = tmp_path / "a.zip"
    zipsave.save({"lr": 0.1}, path)
    _rezip(path, {"data": json.dumps({"_parameters": {target: slice_ref}}).encode()})
    with pytest.raises(zipsave.UnsafeNameError, match=re.escape("is not an entry of the module's own registry")):
        zipsave.restore(torch.nn.Linear(4, 2), path)
    _rezip(path, {"data": json.dumps({"_parameters": {"__class__": slice_ref}}).encode()})
    with pytest.raises(zipsave.UnsafeNameError, match=re.escape("steps through `__class__`")):
        zipsave.restore(torch.nn.Linear(4, 2), path)


@pytest.mark.parametrize("key", ["__class__", "__dict__", "_zipsave_init_args", "forward"])
def test_data_keys_are_plain_attributes(tmp_path, key, trust_unchanged):
    path = tmp_path / "a.zip"
    zipsave.save({"lr": 0.1}, path)
    _rezip(path, {"data": json.dumps({key: 1}).encode()})
    with pytest.raises(zipsave.UnsafeNameError, match=re.escape(f"the name `{key}`")):
        zipsave.restore(torch.nn.Linear(4, 2), path)


def test_component_folders_are_plain_attributes(tmp_path):
    path = tmp_path / "a.zip"
    zipsave.save({"lr": 0.1}, path)
    _rezip(path, {"__class__/data": b"{}"})
    with pytest.raises(zipsave.UnsafeNameError, match=re.escape("`__class__`")):
        zipsave.restore(torch.nn.Linear(4, 2), path)


def test_trust_policy_cannot_be_changed_at_run_time():
    with pytest.raises(AttributeError, match="cannot be changed"):
        TrustPolicy.is_trusted = slice  # type: ignore[method-assign]
    with pytest.raises(AttributeError, match="cannot be rebound"):
        _allowlist.CORE_ALLOWLIST = frozenset({"os.system"})  # type: ignore[misc]
    with pytest.raises(TypeError):
        _allowlist.GROUPS["evil"] = frozenset({"os.system"})  # type: ignore[index]
    assert "os.system" not in _allowlist.default_allowlist()


# -- item 2: a class named in init.json is checked before its module is imported ----------------
@pytest.mark.parametrize("path", ["venv.__main__:X", "tqdm.__main__:X", "MARKER:Algo"])
def test_init_json_class_is_checked_before_import(tmp_path, marker_module, path):
    path = path.replace("MARKER", marker_module)
    archive = tmp_path / "a.zip"
    zipsave.save({"lr": 0.1}, archive)
    _rezip(archive, {"init.json": json.dumps({"class": path, "args": {}}).encode()})
    before = set(sys.modules)
    with pytest.raises(zipsave.UnsafeGlobalError, match=re.escape("import `")):
        zipsave.load(archive)
    # Nothing but zipsave's own modules (imported on first use) came in.
    assert {name for name in set(sys.modules) - before if name.partition(".")[0] != "zipsave"} == set()
    assert not (tmp_path / "IMPORTED").exists()


def test_init_json_class_the_caller_trusts_is_imported(tmp_path, marker_module):
    archive = tmp_path / "a.zip"
    zipsave.save({"lr": 0.1}, archive)
    _rezip(archive, {"init.json": json.dumps({"class": f"{marker_module}:Algo", "args": {"x": 5}}).encode()})
    loaded = zipsave.load(archive, trusted=[f"{marker_module}.Algo"])
    assert (tmp_path / "IMPORTED").exists() and loaded.x == 5 and type(loaded).__name__ == "Algo"


# -- item 3: spaces from archives hold plain numpy arrays ---------------------------------------
@pytest.mark.parametrize("low", [[0.0, 0.0], np.zeros(3, np.float32), np.zeros(2, np.float64), np.array([b"x", b"y"])])
def test_a_box_with_bounds_that_are_not_its_arrays_is_refused(low):
    from gymnasium.spaces import Box

    box = Box(0.0, 1.0, (2,), np.float32)
    box.low = low
    assert space_problem(box) is not None
    with pytest.raises(zipsave.DecodeError, match="space is refused: "):
        restricted_loads(pickle.dumps(box, protocol=4), TrustPolicy())


def test_plain_spaces_pass_the_check():
    from gymnasium.spaces import Box, Dict, Discrete, MultiDiscrete, Text, Tuple

    space = Dict({"b": Box(-1.0, 1.0, (2, 3)), "t": Tuple([Discrete(3), MultiDiscrete([2, 3])]), "s": Text(4)})
    space.seed(0)
    assert space_problem(space) is None
    assert space_problem(restricted_loads(pickle.dumps(space), TrustPolicy())) is None


# -- item 7: deep nesting is an archive error, not a RecursionError -----------------------------
def test_deeply_nested_tensor_file_is_an_archive_error(tmp_path):
    path = tmp_path / "a.zip"
    zipsave.save({"m": torch.nn.Linear(2, 2)}, path)
    depth = 20_000
    buf = io.BytesIO()
    torch.save({"a": 1}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as inner:
        members = {n: inner.read(n) for n in inner.namelist()}
    pkl = next(n for n in members if n.endswith("data.pkl"))
    members[pkl] = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for n, raw in members.items():
            z.writestr(n, raw)
    _rezip(path, {"m.pth": out.getvalue()})
    with pytest.raises(zipsave.ArchiveFormatError, match="member `m.pth`: .*nests containers deeper than 200 levels"):
        zipsave.load(path)
    assert any("nests containers deeper than 200 levels" in note for note in zipsave.inspect(path).notes)


def test_trusted_prefix_never_admits_a_main_module():
    policy = TrustPolicy.make(trusted=["tqdm."])
    assert not policy.is_trusted("tqdm.__main__", "X")
    assert policy.is_trusted("tqdm.std", "tqdm")


@pytest.mark.parametrize("key", ["__class__", "step", "_zipsave_x"])
def test_environment_state_sets_only_plain_attributes(key):
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    state = zipsave.EnvState(env).state_dict()
    layer = next(iter(state))
    state[layer]["attrs"][key] = 1
    with pytest.raises(zipsave.UnsafeNameError, match=re.escape(f"`{key}`")):
        zipsave.EnvState(env).load_state_dict(state)
    assert type(env).__name__ != "int" and callable(env.step)


class Net(zipsave.Saveable, torch.nn.Module):
    """A model whose class lives in an imported module: ``zipsave.load(path)`` builds it."""

    def __init__(self, width=2):
        super().__init__()
        self.body = torch.nn.Linear(width, width)
        self.scale = torch.ones(1)  # a loose tensor: saved in pytorch_variables.pth


def test_default_load_of_a_model_refuses_hostile_variable_names(tmp_path, trust_unchanged):
    path = tmp_path / "net.zip"
    Net().save(path)
    with zipfile.ZipFile(path) as zf:
        assert "pytorch_variables.pth" in zf.namelist()
    buf = io.BytesIO()
    torch.save({HOSTILE_NAMES[0]: torch.zeros(1)}, buf)
    _rezip(path, {"pytorch_variables.pth": buf.getvalue()})
    with pytest.raises(zipsave.UnsafeNameError, match=re.escape("member `pytorch_variables.pth`")):
        zipsave.load(path)
    buf = io.BytesIO()
    torch.save({"scale": torch.full((1,), 3.0)}, buf)
    _rezip(path, {"pytorch_variables.pth": buf.getvalue()})
    assert zipsave.load(path).scale.item() == 3.0  # the object's own variable still loads
