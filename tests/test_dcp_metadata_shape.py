"""DCP metadata is checked in time and memory linear in its bytes, within the caller's limits:
a pickled ``.metadata`` may not share chunk lists or sizes so that its checks multiply, a
tensor's dimensions are counted without multiplying past what a tensor can hold, chunks
whose volumes do not add up are refused before their corners are compared, and the corners
are charged against the allocation budget (``zipsave.Limits``)."""

from __future__ import annotations

import itertools
import json
import pathlib
import pickle
import re
import sys
import warnings
import zipfile

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    TensorProperties,
    TensorStorageMetadata,
)

import zipsave
import zipsave.dcp
from zipsave.dcp import _layout, _tiling

HOSTILE = pathlib.Path(__file__).resolve().parent / "data" / "hostile"


def _filesystem_checkpoint(path: pathlib.Path) -> pathlib.Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "assuming ... a single process": it is
        dcp.save({"x": torch.zeros(2)}, checkpoint_id=str(path), no_dist=True)
    return path


def _shared_chunk_list(tensors: int, chunks: int) -> bytes:
    """``tensors`` keys naming one tensor record whose list names one empty chunk ``chunks``
    times: the memo writes each once, a check of every tensor's chunks walks them all."""
    chunk = ChunkStorageMetadata(offsets=torch.Size([0]), sizes=torch.Size([0]))
    record = TensorStorageMetadata(TensorProperties(dtype=torch.float32), torch.Size([0]), [chunk] * chunks)
    return pickle.dumps(Metadata(state_dict_metadata={f"t{i}": record for i in range(tensors)}, storage_data={}))


def _shared_size(chunks: int, dims: int) -> bytes:
    """``chunks`` chunk records sharing one size of ``dims`` dimensions."""
    ones = torch.Size([1] * dims)
    zeros = torch.Size([0] * dims)
    parts = [ChunkStorageMetadata(offsets=zeros, sizes=ones) for _ in range(chunks)]
    record = TensorStorageMetadata(TensorProperties(dtype=torch.float32), ones, parts)
    return pickle.dumps(Metadata(state_dict_metadata={"x": record}, storage_data={}))


@pytest.mark.parametrize("payload", [_shared_chunk_list(300, 300), _shared_size(1000, 1000)], ids=["chunks", "size"])
def test_pickled_metadata_whose_sharing_multiplies_its_checks_is_refused(tmp_path, payload):
    # 23 KB naming one list of 2 000 chunks under 2 000 keys took 7 s to check, twice (DCP
    # reads the metadata as global, then as rank-local): quadratic in the pickle's size.
    path = _filesystem_checkpoint(tmp_path / "fs")
    (path / ".metadata").write_bytes(payload)
    with pytest.raises(zipsave.ArchiveLimitError, match="shares containers so that walking its"):
        zipsave.dcp.consolidate(path, tmp_path / "out.zip")
    assert not (tmp_path / "out.zip").exists()


def test_a_real_filesystem_writer_checkpoint_still_consolidates(tmp_path):
    path = tmp_path / "fs"
    state = {"m": {f"l{i}.weight": torch.randn(3, 4) for i in range(50)}, "step": torch.tensor(7)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(state, checkpoint_id=str(path), no_dist=True)
    out = zipsave.dcp.consolidate(path, tmp_path / "out.zip")
    assert torch.equal(out["m"]["l3.weight"], state["m"]["l3.weight"])


# -- zipsave's own index (JSON) ---------------------------------------------------------------
def _checkpoint_with(tmp_path: pathlib.Path, entry: dict) -> pathlib.Path:
    """A zipsave DCP checkpoint whose index declares tensor `x` as ``entry`` says."""
    sys.path.insert(0, str(HOSTILE))
    try:
        import make_hostile as mh
    finally:
        sys.path.remove(str(HOSTILE))
    path = tmp_path / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        zipsave.dcp.save({"x": torch.zeros(2)}, path, no_dist=True)
    index = path / _layout.INDEX
    with zipfile.ZipFile(index) as zf:
        doc = json.loads(zf.read(_layout.METADATA))
    doc["state_dict_metadata"]["x"].update(entry)
    index.write_bytes(mh.build_zip([mh.Member(_layout.METADATA, json.dumps(doc).encode())]))
    return path


def _unit_chunks(dims: int) -> list[dict]:
    return [{"offsets": list(bits), "sizes": [1] * dims} for bits in itertools.product((0, 1), repeat=dims)]


def test_chunks_whose_volumes_do_not_add_up_are_refused_before_their_corners(tmp_path, monkeypatch):
    # 100 000 copies of one chunk split along 8 dimensions (5.6 MB of index): 256 corners each,
    # 2 GB and 61 s before the overlap was found; the volumes alone say so.
    path = _checkpoint_with(tmp_path, {"size": [2] * 8, "chunks": [{"offsets": [0] * 8, "sizes": [1] * 8}] * 300})
    corners = []
    monkeypatch.setattr(_tiling, "_corners", lambda *args: corners.append(args))
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("overlap: they hold 300 elements, the tensor 256")):
        zipsave.dcp.consolidate(path, tmp_path / "out.zip")
    assert corners == []


def test_the_corners_compared_are_charged_against_the_callers_limits(tmp_path):
    # An exact tiling of 256 unit chunks along 8 dimensions takes 256 * 257 corners (12 MB of
    # integers); the caller allowed 1 MiB.
    path = _checkpoint_with(tmp_path, {"size": [2] * 8, "chunks": _unit_chunks(8)})
    with pytest.raises(zipsave.ArchiveLimitError, match=re.escape("whose check takes 65792 corners")):
        zipsave.dcp.consolidate(path, tmp_path / "out.zip", limits=zipsave.Limits(alloc_floor=1 << 20))
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("chunk at offsets [0, 0, 0, 0, 0, 0, 0, 0]")):
        zipsave.dcp.consolidate(path, tmp_path / "out.zip")  # the default budget lets it on to the locations


@pytest.mark.parametrize(
    "size, words",
    [
        # 60 000 such dimensions took 9 s to multiply out before the budget refused the product
        ([(1 << 62) - 1] * 2000, "holding more than 9223372036854775807 elements"),
        ([-2, 0], "has size [-2, 0]; dimensions are non-negative integers"),
    ],
)
def test_a_tensors_dimensions_are_counted_without_multiplying_past_a_tensor(tmp_path, size, words):
    path = _checkpoint_with(tmp_path, {"size": size, "chunks": []})
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(words)):
        zipsave.dcp.consolidate(path, tmp_path / "out.zip")
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(words)):
        zipsave.dcp.load({"x": torch.zeros(2)}, path)
