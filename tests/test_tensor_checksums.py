"""Per-tensor checksums (issue 17.2): each stored record of a ``.pth`` member has its own CRC-32
in manifest.json, and read(), in-place restore, loads and ``inspect --verify`` check exactly
the bytes they read, naming the tensor on a mismatch."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib

import pytest
import torch

import zipsave
from zipsave import cli
from zipsave._archive import ArchiveSource
from zipsave._tensors import load_member
from zipsave.exceptions import IntegrityError

FORMAT1 = pathlib.Path(__file__).parent / "data" / "format1"


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(600, 600), torch.nn.Linear(600, 3))


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "model.zip"
    zipsave.save_archive(path, data={"gamma": 0.9}, params={"policy": _net().state_dict()})
    return path


def _member_start(path, member: str) -> int:
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
    raw = pathlib.Path(path).read_bytes()
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    return info.header_offset + 30 + name_len + extra_len


def _flip(src, dst, offset: int) -> None:
    raw = bytearray(pathlib.Path(src).read_bytes())
    raw[offset] ^= 0x01
    pathlib.Path(dst).write_bytes(bytes(raw))


def _corrupt_record(path, tmp_path, record: str = "data/0", at: int = 100) -> pathlib.Path:
    with zipfile.ZipFile(path) as z:
        rec = json.loads(z.read("manifest.json"))["members"]["policy.pth"]["records"][record]
    bad = tmp_path / "bad.zip"
    _flip(path, bad, _member_start(path, "policy.pth") + rec["offset"] + at)
    return bad


def test_every_record_has_its_own_crc(saved):
    with zipfile.ZipFile(saved) as z:
        manifest = json.loads(z.read("manifest.json"))
        for name, entry in manifest["members"].items():
            if not name.endswith(".pth"):
                assert "records" not in entry
                continue
            raw = z.read(name)
            records = entry["records"]
            assert "data.pkl" in records
            assert ("data/0" in records) == (name == "policy.pth")
            for rec in records.values():
                piece = raw[rec["offset"] : rec["offset"] + rec["size"]]
                assert len(piece) == rec["size"]
                assert rec["crc32"] == f"{zlib.crc32(piece):08x}"
            # the member-level fields old readers check are unchanged
            assert entry["crc32"] == f"{z.getinfo(name).CRC:08x}" and entry["size"] == len(raw)
    assert manifest["format_version"] == 1


def test_read_checks_the_record_it_reads(saved, tmp_path):
    bad = _corrupt_record(saved, tmp_path)
    with pytest.raises(IntegrityError, match=re.escape("record `data/0` (tensor `0.weight`): CRC-32")):
        zipsave.read(bad, "policy/0.weight")
    # another tensor of the same member is intact and reads without reading the bad one
    assert torch.equal(zipsave.read(bad, "policy/0.bias"), _net().state_dict()["0.bias"])
    assert torch.equal(zipsave.read(saved, "policy/0.weight"), _net().state_dict()["0.weight"])


def test_read_checks_data_pkl(saved, tmp_path):
    with zipfile.ZipFile(saved) as z:
        rec = json.loads(z.read("manifest.json"))["members"]["policy.pth"]["records"]["data.pkl"]
        pkl = z.read("policy.pth")[rec["offset"] : rec["offset"] + rec["size"]]
    bad = _corrupt_record(saved, tmp_path, "data.pkl", at=pkl.index(b"0.weight") + 3)  # still parses
    assert zipsave.inspect(bad).tensors[0].key == "0.wdight"
    with pytest.raises(IntegrityError, match=re.escape("record `data.pkl`")):
        zipsave.read(bad, "policy/0.bias")


@pytest.mark.parametrize("in_place", [False, True])
def test_member_load_names_the_tensor(saved, tmp_path, in_place):
    bad = _corrupt_record(saved, tmp_path)
    live = _net().state_dict(keep_vars=True) if in_place else None
    with ArchiveSource(bad) as src, pytest.raises(IntegrityError) as caught:
        load_member(src.reader, "policy.pth", device=torch.device("cpu"), targets=live)
    message = str(caught.value)
    assert "archive `" in message and "member `policy.pth`" in message
    assert "record `data/0` (tensor `0.weight`): CRC-32" in message
    assert ("partly overwritten" in message) == in_place


def test_load_and_restore_of_intact_archive(saved):
    net = torch.nn.Sequential(torch.nn.Linear(600, 600), torch.nn.Linear(600, 3))
    zipsave.restore({"policy": net}, saved)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), _net().state_dict().values()))


def test_inspect_verify(saved, tmp_path, capsys):
    assert zipsave.inspect(saved, verify=True).verified is True
    assert zipsave.inspect(saved).verified is None
    bad = _corrupt_record(saved, tmp_path)
    info = zipsave.inspect(bad, verify=True)
    assert info.verified is False
    assert any("tensor `0.weight`" in note for note in info.notes)
    assert cli.main(["inspect", "--verify", str(bad)]) == 1
    assert "verification FAILED" in capsys.readouterr().out
    assert cli.main(["inspect", "--verify", str(saved)]) == 0
    assert "matches its checksum" in capsys.readouterr().out


def test_format1_archive_without_records_verifies_the_whole_member(tmp_path):
    src = FORMAT1 / "app_state.zip"
    with zipfile.ZipFile(src) as z:
        assert all("records" not in e for e in json.loads(z.read("manifest.json"))["members"].values())
    assert torch.equal(zipsave.read(src, "model/weight"), torch.arange(6.0).reshape(2, 3))
    assert zipsave.inspect(src, verify=True).verified is True
    with zipfile.ZipFile(src) as z:
        size = z.getinfo("model.pth").file_size
    bad = tmp_path / "bad.zip"
    _flip(src, bad, _member_start(src, "model.pth") + size - 200)  # far from the weight's bytes
    with pytest.raises(IntegrityError, match=re.escape("no per-tensor checksums, so the whole member was checked")):
        zipsave.read(bad, "model/weight")


def test_sb3_archive_reads_checked(tmp_path):
    src = pathlib.Path(__file__).parent / "data" / "sb3" / "ppo_cartpole.zip"
    info = zipsave.inspect(src, verify=True)
    assert info.verified is True
    name = info.tensors[0].name
    assert isinstance(zipsave.read(src, name), torch.Tensor)


def test_zlib_fallback_writes_the_same_bytes(saved, tmp_path):
    """Without ISA-L (forced with ZIPSAVE_CRC=zlib) the checksums, so the archive, are identical."""
    code = (
        "import sys, torch, zipsave; from zipsave._archive import crc_backend; assert crc_backend() == 'zlib';"
        "torch.manual_seed(0);"
        "net = torch.nn.Sequential(torch.nn.Linear(600, 600), torch.nn.Linear(600, 3));"
        "zipsave.save_archive(sys.argv[1], data={'gamma': 0.9}, params={'policy': net.state_dict()});"
        "zipsave.read(sys.argv[1], 'policy/0.weight')"
    )
    out = tmp_path / "zlib.zip"
    env = dict(os.environ, ZIPSAVE_CRC="zlib")
    subprocess.run([sys.executable, "-c", code, str(out)], check=True, env=env)
    with zipfile.ZipFile(saved) as a, zipfile.ZipFile(out) as b:
        ma, mb = json.loads(a.read("manifest.json")), json.loads(b.read("manifest.json"))
    for name in ma["members"]:
        if name != "system_info.txt":
            assert {k: v for k, v in ma["members"][name].items()} == mb["members"][name], name


def test_old_reader_rules_ignore_the_new_field(saved, tmp_path):
    """What a format-1 reader does (docs/format.rst's check): unknown fields are ignored."""
    copy = tmp_path / "copy.zip"
    shutil.copy(saved, copy)
    with zipfile.ZipFile(copy) as archive:
        manifest = json.loads(archive.read("manifest.json"))
        for info in archive.infolist():
            if info.filename != "manifest.json":
                entry = manifest["members"][info.filename]
                assert entry["size"] == info.file_size and entry["crc32"] == f"{info.CRC:08x}"
