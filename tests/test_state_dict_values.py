"""State dicts given as values of an app state (the torch idiom ``{"model":
model.state_dict(), "optimizer": optimizer.state_dict()}``): each is a ``.pth`` member of its
key, loads and restores as the value it was, and archives that held it in ``data`` (before
0.2) load and restore as they did."""

from __future__ import annotations

import collections
import io
import json
import re
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import zipsave
from zipsave import cli

OLD = Path(__file__).parent / "data" / "statedict_in_data"
sys.path.insert(0, str(OLD))

from make_checkpoint import build  # noqa: E402


def trained(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model, optimizer = build()
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def idiom(model: torch.nn.Module, optimizer: torch.optim.Optimizer, epoch: int = 5) -> dict:
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}


def members(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as archive:
        return archive.namelist()


def read_json(path: Path, member: str) -> dict:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read(member))


def assert_same(a, b, storages: dict | None = None) -> None:
    """``a`` is ``b`` as ``torch.load`` gives it: types, key order, an ``OrderedDict``'s
    ``_metadata``, tensors (type, dtype, shape, ``requires_grad``, values) and which of them
    share a storage."""
    storages = {} if storages is None else storages
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor) and a.layout != torch.strided:
        assert (a.layout, a.dtype, a.shape) == (b.layout, b.dtype, b.shape)
        assert torch.equal(a.to_dense(), b.to_dense())
    elif isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape, a.requires_grad, a.stride()) == (b.dtype, b.shape, b.requires_grad, b.stride())
        assert torch.equal(a.detach(), b.detach())
        key = a.untyped_storage().data_ptr()
        assert storages.setdefault(key, b.untyped_storage().data_ptr()) == b.untyped_storage().data_ptr()
    elif isinstance(a, dict):
        assert list(a) == list(b)
        assert getattr(a, "_metadata", None) == getattr(b, "_metadata", None)
        for k in a:
            assert_same(a[k], b[k], storages)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y, storages)
    else:
        assert a == b


def test_torch_idiom_writes_one_pth_member_per_state_dict(tmp_path):
    path = tmp_path / "ckpt.zip"
    zipsave.save(idiom(*trained()), path)
    assert members(path)[:4] == ["data", "pytorch_variables.pth", "model.pth", "optimizer.pth"]
    assert read_json(path, "data") == {"epoch": 5}  # no tensor in JSON, no pickled copy
    # each with its place among the app state's keys
    assert read_json(path, "manifest.json")["state_dict_values"] == {"model.pth": 0, "optimizer.pth": 1}
    with zipfile.ZipFile(path) as archive:  # genuine torch.save output
        member = torch.load(io.BytesIO(archive.read("model.pth")), weights_only=True)
    assert_same(member, trained()[0].state_dict())


def rich_state() -> dict:
    """State dicts of every shape the torch idiom meets: a module's (with ``_metadata``), one
    with its Parameters (``keep_vars=True``), an optimizer's with two parameter groups, tensors
    that require grad, views of one storage, other dtypes, lists and int keys."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    optimizer = torch.optim.Adam(
        [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.5}], lr=1e-3
    )
    model(torch.randn(6, 3)).sum().backward()
    optimizer.step()
    base = torch.arange(12.0)
    return {
        "model": model.state_dict(),
        "params": model.state_dict(keep_vars=True),
        "optimizer": optimizer.state_dict(),
        "views": {"base": base, "middle": base[2:8].view(2, 3), "again": base},
        "mixed": collections.OrderedDict(
            half=torch.ones(3, dtype=torch.bfloat16),
            grad=torch.ones(2, requires_grad=True),
            steps=[torch.tensor(1), {0: torch.zeros(1, dtype=torch.int64), 1: "x"}, (1.5, None, True)],
            dtype=torch.float16,
        ),
    }


def test_load_gives_back_what_torch_load_gives(tmp_path):
    state = rich_state()
    zipsave.save({**state, "epoch": 7}, tmp_path / "ckpt.zip")
    torch.save(state, tmp_path / "ckpt.pt")
    back = zipsave.load(tmp_path / "ckpt.zip")
    expected = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert list(back) == [*state, "epoch"] and back["epoch"] == 7
    assert {f"{key}.pth" for key in state} <= set(members(tmp_path / "ckpt.zip"))
    assert_same({k: back[k] for k in state}, expected)
    assert back["model"]._metadata == state["model"]._metadata  # load_state_dict reads versions there
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    model.load_state_dict(back["model"])
    optimizer = torch.optim.Adam([{"params": model[0].parameters()}, {"params": model[2].parameters()}])
    optimizer.load_state_dict(back["optimizer"])
    assert optimizer.param_groups[1]["lr"] == 0.5
    assert torch.equal(optimizer.state[model[2].weight]["exp_avg"], state["optimizer"]["state"][2]["exp_avg"])


def test_restore_fills_the_live_state_dicts_in_place(tmp_path):
    path = tmp_path / "ckpt.zip"
    saved_model, saved_optimizer = trained(0)
    zipsave.save(idiom(saved_model, saved_optimizer), path)
    assert "model.pth" in members(path)
    model, optimizer = trained(1)
    live = idiom(model, optimizer, epoch=0)
    state_dict, weight = live["model"], live["model"]["0.weight"]
    zipsave.restore(live, path, strict=True)
    assert live["epoch"] == 5
    # The same dict and tensors, filled: they are the model's own, so the model holds the saved weights.
    assert live["model"] is state_dict and live["model"]["0.weight"] is weight
    assert torch.equal(model[0].weight, saved_model[0].weight)
    optimizer.load_state_dict(live["optimizer"])
    assert_same(optimizer.state_dict(), saved_optimizer.state_dict())


def test_restore_keeps_strict_semantics(tmp_path):
    """A state dict saved as a value is a value on both sides of a strict restore, as when it
    was in ``data``; a stateful object missing from either side is still named."""
    path = tmp_path / "ckpt.zip"
    net = torch.nn.Linear(2, 2)
    zipsave.save({"net": net, **idiom(*trained())}, path)
    assert read_json(path, "manifest.json")["state_dict_values"] == {"model.pth": 1, "optimizer.pth": 2}
    live = {"epoch": 0}  # a key the live dict lacks is added, as data values are
    zipsave.restore({"net": torch.nn.Linear(2, 2), **live}, path, strict=True)
    with pytest.raises(
        zipsave.ParameterMismatchError, match=re.escape("holds stateful entries ['net'], but the app state has [].")
    ):
        zipsave.restore(idiom(*trained(1)), path, strict=True)
    with pytest.raises(
        zipsave.ParameterMismatchError,
        match=re.escape("holds stateful entries ['net'], but the app state has ['model', 'net']."),
    ):
        zipsave.restore({"net": torch.nn.Linear(2, 2), "model": trained(1)[0]}, path, strict=True)
    other = torch.nn.Linear(2, 2)
    zipsave.restore({"net": other}, path, exclude=["model", "optimizer"], strict=True)
    assert torch.equal(other.weight, net.weight)


def test_archive_with_state_dicts_in_data_loads_and_restores(tmp_path):
    """``checkpoint.zip`` was written before 0.2 made state dicts members (make_checkpoint.py)."""
    assert "model.pth" not in members(OLD / "checkpoint.zip")
    expected = torch.load(OLD / "expected.pt", weights_only=True)
    back = zipsave.load(OLD / "checkpoint.zip")
    assert back["epoch"] == 3 and type(back["model"]) is collections.OrderedDict
    for key in ("model", "optimizer"):
        assert json.dumps(back[key], default=repr) == json.dumps(expected[key], default=repr)
        assert all(torch.equal(back["model"][k], v) for k, v in expected["model"].items())
    model, optimizer = build()
    live = idiom(model, optimizer, epoch=0)
    zipsave.restore(live, OLD / "checkpoint.zip", strict=True)
    assert live["epoch"] == 3 and torch.equal(model[0].weight, expected["model"]["0.weight"])
    optimizer.load_state_dict(live["optimizer"])
    assert torch.equal(optimizer.state_dict()["state"][0]["exp_avg"], expected["optimizer"]["state"][0]["exp_avg"])
    assert zipsave.read(OLD / "checkpoint.zip", "model").keys() == expected["model"].keys()


Point = collections.namedtuple("Point", "x y")
_tensor_with_attribute = torch.ones(2)
_tensor_with_attribute.note = "kept by data, dropped by torch.save's reader"  # type: ignore[attr-defined]
_extra_attribute = collections.OrderedDict(w=torch.ones(2))
_extra_attribute.note = "an attribute other than _metadata"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("value", "as_member"),
    [
        ({"w": torch.ones(2)}, True),
        ({0: {"step": torch.tensor(3.0), "ids": [1, 2]}, "tags": {"a", "b"}, "c": 1j, "b": b"\x00"}, True),
        (collections.OrderedDict(w=torch.nn.Parameter(torch.ones(2))), True),
        ({"w": torch.ones(2), "n": np.zeros(2)}, False),  # a numpy array: what the reader refuses
        ({"w": torch.ones(2), "d": collections.deque([1])}, False),
        ({"w": torch.ones(2), "p": Point(1, 2)}, False),
        ({"w": torch.ones(2), "s": torch.Size([2])}, False),  # read back as a tuple
        ({"w": torch.eye(2).to_sparse(), "b": torch.ones(1)}, True),
        ({"w": torch.ones(2), "q": torch.ones(2).bfloat16(), "u": torch.ones(2, dtype=torch.uint8)}, True),
        ({"w": _tensor_with_attribute}, False),
        (_extra_attribute, False),
        (collections.defaultdict(list, w=torch.ones(2)), False),
        ({"lr": 0.1, "betas": (0.9, 0.99)}, False),  # no tensor: a plain value
        ({(1, 2): torch.ones(2)}, False),  # a key no state dict has
        ({}, False),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, bool) else str(v),
)
def test_what_is_a_state_dict(tmp_path, value, as_member):
    """A state dict is a member when the reader gives it back identically; anything else stays
    in ``data``, as every value did before, with no error."""
    path = tmp_path / "a.zip"
    zipsave.save({"value": value}, path)
    assert ("value.pth" in members(path)) is as_member
    assert ("value" in read_json(path, "data")) is not as_member
    back = zipsave.load(path, trusted=[Point])["value"]
    assert type(back) is type(value) and list(back) == list(value)
    if as_member:
        assert_same(back, value)


@pytest.mark.parametrize(
    ("key", "as_member"),
    [
        ("data", True),
        ("init.json", True),
        ("a.b", True),
        ("é", True),
        ("pytorch_variables", False),  # the folder's own members
        ("tensors", False),
        ("a/b", False),  # a folder
        ("x\\y", False),
        ("", False),
        ("C:", False),
        ("..", True),  # `...pth`, one name
        ("ab\x00", False),
    ],
)
def test_keys_that_cannot_name_a_member_stay_in_data(tmp_path, key, as_member):
    path = tmp_path / "a.zip"
    value = {"w": torch.arange(3.0)}
    zipsave.save({key: value, "pytorch_variables_": 1}, path)
    assert (f"{key}.pth" in read_json(path, "manifest.json").get("state_dict_values", {})) is as_member
    assert (key in read_json(path, "data")) is not as_member
    back = zipsave.load(path)
    assert torch.equal(back[key]["w"], value["w"]) and back["pytorch_variables_"] == 1
    live = {key: {"w": torch.zeros(3)}}
    zipsave.restore(live, path, strict=True)
    assert torch.equal(live[key]["w"], value["w"])


def test_tools_show_the_member(tmp_path, capsys):
    a, b = tmp_path / "a.zip", tmp_path / "b.zip"
    zipsave.save(idiom(*trained(0)), a)
    zipsave.save(idiom(*trained(1)), b)
    info = zipsave.inspect(a)
    assert [t.name for t in info.tensors][:2] == ["model/0.weight", "model/0.bias"]
    assert [e.key for e in info.data] == ["epoch"]
    whole = zipsave.read(a, "model")  # read whole by its key, as the data key it was
    assert type(whole) is collections.OrderedDict and whole._metadata == trained(0)[0].state_dict()._metadata
    assert torch.equal(zipsave.read(a, "optimizer/state.0.exp_avg"), trained(0)[1].state_dict()["state"][0]["exp_avg"])
    assert cli.main(["diff", str(a), str(b)]) == 1
    assert "~ tensor  model/0.weight: max |a-b| = " in capsys.readouterr().out
    assert cli.main(["verify", str(a)]) == 0


def test_custom_objects_and_background_saves(tmp_path):
    path = tmp_path / "a.zip"
    state = idiom(*trained())
    zipsave.save(state, path)
    assert "model.pth" in members(path)
    assert zipsave.load(path, custom_objects={"model": "given"})["model"] == "given"  # replaced unread, as a data key
    live = {"model": {"w": 1}}
    zipsave.restore(live, path, custom_objects={"model": {"w": 2}})
    assert live["model"] == {"w": 2}
    zipsave.save(state, tmp_path / "bg.zip", background=True).wait()
    assert (tmp_path / "bg.zip").read_bytes() == path.read_bytes()
