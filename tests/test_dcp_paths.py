"""File names in a checkpoint's metadata are confined to its directory (issue #27, item 6): DCP's
pickled ``.metadata`` (``storage_data.relative_path``) and zipsave's index (rank files)."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import re
import warnings
import zipfile

import pytest
import torch

import zipsave
import zipsave.dcp

dcp = pytest.importorskip("torch.distributed.checkpoint")


def _dcp_checkpoint(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled": one process on purpose
        dcp.save({"w": torch.ones(3)}, storage_writer=dcp.FileSystemWriter(str(folder)), no_dist=True)


def _point_storage_at(folder, name):
    meta_path = folder / ".metadata"
    with open(meta_path, "rb") as fp:
        metadata = pickle.load(fp)  # the test's own file
    metadata.storage_data = {
        index: dataclasses.replace(info, relative_path=name) for index, info in metadata.storage_data.items()
    }
    with open(meta_path, "wb") as fp:
        pickle.dump(metadata, fp)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("SECRET_ABS", "is an absolute path"),
        ("../secret.txt", "leads out of the checkpoint directory"),
        ("/dev/zero", "is an absolute path"),
        ("/dev/stdin", "is an absolute path"),
        ("link", "resolves (through a symbolic link) to a place outside"),
        ("fifo", "is not a regular file"),
        ("sub", "is not a regular file"),
    ],
)
def test_consolidate_reads_only_regular_files_inside_the_directory(tmp_path, name, why):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"secret" * 1000)
    ckpt = tmp_path / "ckpt"
    _dcp_checkpoint(ckpt)
    os.symlink(secret, ckpt / "link")
    os.mkfifo(ckpt / "fifo")
    (ckpt / "sub").mkdir()
    name = str(secret) if name == "SECRET_ABS" else name
    _point_storage_at(ckpt, name)
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(f"names the file {name!r}, which {why}")) as info:
        zipsave.dcp.consolidate(ckpt, tmp_path / "out.zip")
    assert info.value.key == name
    assert not (tmp_path / "out.zip").exists()


def test_consolidate_still_reads_an_intact_checkpoint(tmp_path):
    _dcp_checkpoint(tmp_path / "ckpt")
    state = zipsave.dcp.consolidate(tmp_path / "ckpt", tmp_path / "out.zip")
    assert torch.equal(state["w"], torch.ones(3))


@pytest.mark.parametrize("name", ["../outside.zip", "/etc/passwd", "/dev/zero"])
def test_zip_reader_rank_files_stay_inside_the_directory(tmp_path, name):
    zipsave.dcp.save({"w": torch.ones(3)}, tmp_path / "ckpt")
    index = tmp_path / "ckpt" / "index.zip"
    with zipfile.ZipFile(index) as zf:
        doc = json.loads(zf.read("dcp_metadata.json"))
    for rank in doc["ranks"]:
        rank["file"] = name
    with zipfile.ZipFile(index, "w") as zf:  # without manifest.json, as a hand-made index
        zf.writestr("dcp_metadata.json", json.dumps(doc))
    target = {"w": torch.zeros(3)}
    for load in (
        lambda: zipsave.dcp.load(target, tmp_path / "ckpt"),
        lambda: zipsave.dcp.consolidate(tmp_path / "ckpt", tmp_path / "out.zip"),
    ):
        with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(f"names the file {name!r}")):
            load()
    assert torch.equal(target["w"], torch.zeros(3))


def test_dcp_failures_are_zipsave_errors(tmp_path):
    zipsave.dcp.save({"w": torch.ones(3)}, tmp_path / "ckpt")
    with pytest.raises(zipsave.ZipsaveError):
        zipsave.dcp.load({"w": torch.zeros(5)}, tmp_path / "ckpt")  # DCP's own size check
