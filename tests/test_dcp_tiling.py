"""DCP values only from bytes the checkpoint holds: chunks tile each tensor exactly (no gap, no
overlap, nothing outside), and the tensors fit the allocation budget, before anything is
allocated -- for ``consolidate``, and for ``dcp.load`` into a caller's template."""

from __future__ import annotations

import itertools
import json
import pathlib
import re
import sys
import types
import warnings
import zipfile

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zipsave
import zipsave.dcp
from zipsave.dcp import _layout
from zipsave.dcp._tiling import MAX_SPLIT_DIMS, check_tiling

HOSTILE = pathlib.Path(__file__).resolve().parent / "data" / "hostile"


def _chunks(*boxes):
    return [types.SimpleNamespace(offsets=torch.Size(o), sizes=torch.Size(s)) for o, s in boxes]


@pytest.mark.parametrize(
    "size, boxes",
    [
        ((4, 6), [((0, 0), (4, 6))]),
        ((4, 6), [((0, 0), (2, 6)), ((2, 0), (2, 6))]),
        ((4, 6), [((0, 0), (2, 3)), ((0, 3), (2, 3)), ((2, 0), (2, 3)), ((2, 3), (2, 3))]),
        ((3, 3), [((0, 0), (1, 3)), ((1, 0), (2, 1)), ((1, 1), (2, 2))]),  # not a grid
        ((5,), [((0,), (2,)), ((2,), (3,)), ((5,), (0,))]),  # an empty shard of an uneven split
        ((), [((), ())]),  # a scalar
        ((0, 3), []),  # no elements: nothing to cover
        ((3, 3), [((1, 0), (2, 1)), ((0, 0), (1, 3)), ((1, 1), (2, 2))]),  # any order
    ],
)
def test_exact_tilings_pass(size, boxes):
    check_tiling("t", size, _chunks(*boxes))


@pytest.mark.parametrize(
    "size, boxes, words",
    [
        ((4, 6), [((0, 0), (2, 6))], "leave part of it uncovered: they hold 12 elements, the tensor 24"),
        ((4, 6), [((0, 0), (3, 6)), ((2, 0), (2, 6))], "overlap: they hold 30 elements, the tensor 24"),
        (
            (4,),
            [((0,), (2,)), ((1,), (2,))],
            "overlap and leave part of it uncovered: they hold 4 elements, the tensor 4",
        ),
        ((4, 6), [((0, 0), (2, 6)), ((2, 0), (2, 6)), ((0, 0), (4, 6))], "overlap"),
        (
            (4, 6),
            [((0, 0), (4, 6)), ((3, 0), (2, 6))],
            "has a chunk at offsets [3, 0] of sizes [2, 6], outside the tensor",
        ),
        ((4, 6), [((0, 0), (4, 6, 1))], "outside the tensor"),
        ((3, 4), [((0, 0), (3, 4)), ((-1, 0), (1, 4))], "outside the tensor"),
    ],
)
def test_gaps_overlaps_and_strays_are_refused(size, boxes, words):
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(words)):
        check_tiling("t", size, _chunks(*boxes))


def test_splitting_too_many_dimensions_is_a_limit():
    size = (2,) * (MAX_SPLIT_DIMS + 1)
    boxes = [(tuple(bits), (1,) * len(size)) for bits in itertools.product((0, 1), repeat=len(size))]
    with pytest.raises(zipsave.ArchiveLimitError, match=re.escape(f"split along {MAX_SPLIT_DIMS + 1} dimensions")):
        check_tiling("t", size, _chunks(*boxes))


@st.composite
def boxes_in_grid(draw):
    size = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    boxes = []
    for _ in range(draw(st.integers(0, 5))):
        lo = tuple(draw(st.integers(0, n - 1)) for n in size)
        hi = tuple(draw(st.integers(a + 1, n)) for a, n in zip(lo, size))
        boxes.append((lo, tuple(b - a for a, b in zip(lo, hi))))
    return size, boxes


@st.composite
def guillotine(draw):
    """Exact tilings made by cutting boxes in two, any dimension, any number of times."""
    size = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    boxes = [((0,) * len(size), size)]
    for _ in range(draw(st.integers(0, 6))):
        i = draw(st.integers(0, len(boxes) - 1))
        lo, sz = boxes[i]
        dims = [d for d in range(len(sz)) if sz[d] > 1]
        if not dims:
            continue
        d = draw(st.sampled_from(dims))
        cut = draw(st.integers(1, sz[d] - 1))
        first = (lo, sz[:d] + (cut,) + sz[d + 1 :])
        second = (lo[:d] + (lo[d] + cut,) + lo[d + 1 :], sz[:d] + (sz[d] - cut,) + sz[d + 1 :])
        boxes[i : i + 1] = [first, second]
    return size, boxes


def _covers_exactly(size, boxes) -> bool:
    count = dict.fromkeys(itertools.product(*(range(n) for n in size)), 0)
    for lo, sz in boxes:
        for cell in itertools.product(*(range(a, a + n) for a, n in zip(lo, sz))):
            count[cell] += 1
    return all(c == 1 for c in count.values())


@settings(max_examples=300, deadline=None)
@given(case=st.one_of(boxes_in_grid(), guillotine()))
def test_the_corner_check_agrees_with_counting_cells(case):
    size, boxes = case
    exact = _covers_exactly(size, boxes)
    try:
        check_tiling("t", size, _chunks(*boxes))
    except zipsave.ArchiveFormatError:
        assert not exact
    else:
        assert exact


# -- through the doors ------------------------------------------------------------------------
def _rewrite_index(ckpt: pathlib.Path, edit) -> None:
    sys.path.insert(0, str(HOSTILE))
    try:
        import make_hostile as mh
    finally:
        sys.path.remove(str(HOSTILE))
    index = ckpt / _layout.INDEX
    with zipfile.ZipFile(index) as zf:
        doc = json.loads(zf.read(_layout.METADATA))
    edit(doc)
    index.write_bytes(mh.build_zip([mh.Member(_layout.METADATA, json.dumps(doc).encode())]))


@pytest.fixture
def ckpt(tmp_path):
    path = tmp_path / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        zipsave.dcp.save({"x": torch.arange(12.0).reshape(3, 4)}, path, no_dist=True)
    return path


def _entry(doc):
    return doc["state_dict_metadata"]["x"]


def test_a_tensor_no_chunk_covers_wholly_is_refused_by_consolidate_and_load(ckpt, tmp_path):
    # issue 40: a 3x4 tensor claimed 4x4 came back with rows no chunk wrote (heap bytes)
    _rewrite_index(ckpt, lambda doc: _entry(doc).update(size=[4, 4]))
    words = "the chunks of tensor `x` (size [4, 4]) leave part of it uncovered: they hold 12 elements, the tensor 16."
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(words)):
        zipsave.dcp.consolidate(ckpt, tmp_path / "out.zip")
    template = {"x": torch.full((4, 4), 7.0)}
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(words)):
        zipsave.dcp.load(template, ckpt)
    assert torch.equal(template["x"], torch.full((4, 4), 7.0))  # refused before a byte was written


def test_a_chunk_outside_its_tensor_is_refused(ckpt, tmp_path):
    def edit(doc):
        _entry(doc)["chunks"][0]["offsets"] = [1, 0]
        doc["storage_data"][0]["offset"] = [1, 0]

    _rewrite_index(ckpt, edit)
    with pytest.raises(
        zipsave.ArchiveFormatError, match=re.escape("has a chunk at offsets [1, 0] of sizes [3, 4], outside")
    ):
        zipsave.dcp.consolidate(ckpt, tmp_path / "out.zip")


def test_a_global_size_past_the_budget_is_refused_before_allocating(ckpt, tmp_path):
    # issue 40: 8192x8192 from one 3x4 chunk would be a 256 MiB tensor from a 1.7 KB checkpoint
    def edit(doc):
        _entry(doc)["size"] = [8192, 8192]

    _rewrite_index(ckpt, edit)
    with pytest.raises(
        zipsave.ArchiveLimitError,
        match=re.escape("tensor `x` (size [8192, 8192]) brings the tensors to 268435456 bytes, past the"),
    ):
        zipsave.dcp.consolidate(ckpt, tmp_path / "out.zip")


def test_a_stored_chunk_of_another_shape_is_refused(ckpt, tmp_path):
    def edit(doc):
        doc["storage_data"][0]["shape"] = [2, 4]

    _rewrite_index(ckpt, edit)
    with pytest.raises(
        zipsave.ArchiveFormatError,
        match=re.escape(
            "tensor `x`'s chunk at offsets [0, 0] (float32, sizes [3, 4]) has a stored float32 chunk of shape [2, 4]."
        ),
    ):
        zipsave.dcp.consolidate(ckpt, tmp_path / "out.zip")


def test_a_filesystem_writer_checkpoint_with_a_gap_is_refused(tmp_path):
    import pickle

    import torch.distributed.checkpoint as dcp

    path = tmp_path / "fs"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"x": torch.arange(12.0).reshape(3, 4)}, checkpoint_id=str(path), no_dist=True)
    metadata = pickle.loads((path / ".metadata").read_bytes())  # our own checkpoint, written just above
    metadata.state_dict_metadata["x"].size = torch.Size([6, 4])
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(
        zipsave.ArchiveFormatError, match=re.escape("the chunks of tensor `x` (size [6, 4]) leave part")
    ):
        zipsave.dcp.consolidate(path, tmp_path / "out.zip")


def test_a_filesystem_writer_chunk_is_read_as_a_pth_member_is(tmp_path):
    # Each chunk of DCP's own format is a torch.save file: read through zipsave's checked
    # loader, so a chunk that is a hostile sparse tensor is refused, not copied.
    import pickle

    import torch.distributed.checkpoint as dcp

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from adversarial import values

    path = tmp_path / "fs"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"x": torch.arange(9.0).reshape(3, 3)}, checkpoint_id=str(path), no_dist=True)
    metadata = pickle.loads((path / ".metadata").read_bytes())  # our own checkpoint, written just above
    [info] = metadata.storage_data.values()
    hostile = values.pth(values.tensor_families()["coo_index_past_size"])
    blob = path / info.relative_path
    blob.write_bytes(blob.read_bytes()[: info.offset] + hostile)
    info.length = len(hostile)
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(
        zipsave.ZipsaveError,
        match=re.escape("is not a loadable torch state (torch.load: size is inconsistent with indices"),
    ):
        zipsave.dcp.consolidate(path, tmp_path / "out.zip")
    assert not (tmp_path / "out.zip").exists()
