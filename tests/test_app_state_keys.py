"""Keys that name a member or a folder: an app state's keys, a component dict's, a
``Saveable``'s attribute names. A save either writes an archive that loads back what was saved,
or refuses the key with an ``EncodeError`` before anything is written."""

from __future__ import annotations

import re

import pytest
import torch

import zipsave


class Holder:
    """A plain object holding a module: a component folder of its own."""

    def __init__(self) -> None:
        self.net = torch.nn.Linear(2, 2)


class Small(zipsave.Saveable):
    def __init__(self) -> None:
        self.net = torch.nn.Linear(2, 2)


def _previous(path):
    """An archive already at ``path``, and its bytes."""
    zipsave.save({"step": 1}, path)
    return path.read_bytes()


def _refused(path, obj, key, words):
    before = _previous(path)
    with pytest.raises(zipsave.EncodeError, match=re.escape(words)) as info:
        zipsave.save(obj, path)
    assert info.value.key == key
    assert "nothing was written" in str(info.value)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    return info.value


@pytest.mark.parametrize(
    ("key", "words", "fixed"),
    [
        (
            "pytorch_variables",
            "`pytorch_variables.pth` is the folder's member for loose tensors",
            "pytorch_variables_state",
        ),
        ("tensors", "`tensors.pth` is the old name of `pytorch_variables.pth`", "tensors_state"),
        ("a/b", "`/` separates folders in a zip: the member `a/b.pth`", "a_b"),
        ("/x", "`/` separates folders in a zip", "_x"),
        ("C:", "Windows reads `:` as a drive", "C_"),
        ("a:b", "Windows reads `:` as a drive", "a_b"),
        ("x\x00y", "zip tools cut the member `x\\x00y.pth` short at a control character", "x_y"),
    ],
    ids=["pytorch_variables", "tensors", "slash", "absolute", "drive", "colon", "nul"],
)
def test_a_key_that_cannot_name_a_member_is_refused_and_its_hint_works(tmp_path, key, words, fixed):
    net = torch.nn.Linear(2, 2)
    path = tmp_path / "state.zip"
    err = _refused(path, {key: net, "step": 3}, key, words)
    if fixed is not None:
        assert f"`{fixed!r}`" in str(err)
        zipsave.save({fixed: net, "step": 3}, path)
        other = {fixed: torch.nn.Linear(2, 2), "step": 0}
        zipsave.restore(other, path)
        assert torch.equal(other[fixed].weight, net.weight) and other["step"] == 3


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("..", "`..` names the folder above in a path"),
        (".", "`.` names this folder in a path"),
        ("a/b", "`/` separates folders in a zip: the folder `a/b/`"),
        ("C:", "Windows reads `:` as a drive"),
        ("x\x00y", "at a control character"),
        ("", "an empty key leaves the folder"),
    ],
    ids=["dotdot", "dot", "slash", "drive", "nul", "empty"],
)
@pytest.mark.parametrize("make", [Holder, Small], ids=["object", "saveable"])
def test_a_key_that_cannot_name_a_folder_is_refused(tmp_path, key, words, make):
    _refused(tmp_path / "state.zip", {key: make(), "step": 3}, key, words)


@pytest.mark.parametrize(
    "app",
    [{"\udc80": 1}, {"\udc80": torch.nn.Linear(2, 2)}, {"\udc80": Holder()}],
    ids=["value", "module", "component"],
)
def test_a_key_that_is_not_utf8_is_refused_by_name(tmp_path, app):
    err = _refused(tmp_path / "state.zip", app, "\udc80", "the key is not valid UTF-8 text")
    assert "key `\\udc80`" in str(err)  # escaped: printing the message works
    str(err).encode("utf-8")


def test_a_string_inside_a_value_that_is_not_utf8_is_said_so(tmp_path):
    err = _refused(tmp_path / "state.zip", {"ok": {"\udc80": 1}}, "ok", "that is not valid UTF-8")
    assert "nested too deeply" not in str(err)


class Variables(zipsave.Saveable):
    def __init__(self) -> None:
        self.pytorch_variables = torch.nn.Linear(2, 2)


class Tensors(zipsave.Saveable):
    def __init__(self) -> None:
        self.tensors = torch.nn.Linear(2, 2)


class Slash(zipsave.Saveable):
    def __init__(self) -> None:
        setattr(self, "a/b", torch.nn.Linear(2, 2))


class Nets(zipsave.Saveable):
    def __init__(self) -> None:
        self.nets = {"C:": torch.nn.Linear(2, 2), "lr": 0.1}


class Agents(zipsave.Saveable):
    def __init__(self) -> None:
        self.agents = {"..": Small(), "ok": Small()}


class Mixed(zipsave.Saveable):
    def __init__(self) -> None:
        self.parts = {"x\\y": Holder(), "lr": 0.1}


@pytest.mark.parametrize(
    ("make", "key", "words"),
    [
        (Variables, "pytorch_variables", "`pytorch_variables.pth` is the folder's member"),
        (Tensors, "tensors", "`tensors.pth` is the old name"),
        (Slash, "a/b", "`/` separates folders in a zip"),
        (Agents, "agents", "the dict of components `agents` has the key '..': `..` names the folder above"),
    ],
    ids=["pytorch_variables", "tensors", "slash", "component-dict"],
)
def test_an_attribute_that_cannot_name_a_member_or_folder_is_refused(tmp_path, make, key, words):
    _refused(tmp_path / "model.zip", make(), key, words)


@pytest.mark.parametrize(("key", "words"), [("tensors", "`tensors.pth` is the old name"), ("a/b", "`/` separates")])
def test_save_archive_refuses_a_params_name_a_load_would_not_find(tmp_path, key, words):
    path = tmp_path / "sb3.zip"
    before = _previous(path)
    with pytest.raises(zipsave.EncodeError, match=re.escape(words)):
        zipsave.save_archive(path, params={key: {"w": torch.zeros(1)}})
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "key", ["a\\b", "", "agent:0", "tab\tkey", "k" * 300], ids=["backslash", "empty", "colon", "tab", "long"]
)
def test_a_key_zipsave_reads_back_still_saves_a_module(tmp_path, key):
    # Names some zip tools cannot extract on every file system, but which zipsave writes and
    # reads back, as it did before keys were checked: a save that worked is not refused.
    net = torch.nn.Linear(2, 2)
    zipsave.save({key: net, "step": 3}, tmp_path / "state.zip")
    back = zipsave.load(tmp_path / "state.zip")
    assert torch.equal(back[key]["weight"], net.weight) and back["step"] == 3
    live = {key: torch.nn.Linear(2, 2), "step": 0}
    zipsave.restore(live, tmp_path / "state.zip")
    assert torch.equal(live[key].weight, net.weight) and live["step"] == 3


def test_a_saveable_whose_keys_zipsave_reads_back_still_saves(tmp_path):
    nets, mixed = Nets(), Mixed()
    nets.save(tmp_path / "nets.zip")
    mixed.save(tmp_path / "mixed.zip")
    assert torch.equal(Nets.load(tmp_path / "nets.zip").nets["C:"].weight, nets.nets["C:"].weight)
    assert torch.equal(Mixed.load(tmp_path / "mixed.zip").parts["x\\y"].net.weight, mixed.parts["x\\y"].net.weight)
