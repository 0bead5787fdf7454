"""zipsave.dcp in one process (no process group): safety of what loading reads, the slice
reader, and the import boundary. The multi-rank tests are in test_dcp.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile

import pytest
import torch

import zipsave
import zipsave.dcp
from zipsave.dcp._region import runs


class Unlisted:
    """A value torch's weights_only loader refuses."""

    def __init__(self, x=1):
        self.x = x


def test_importing_zipsave_does_not_import_the_distributed_stack():
    # `import torch` alone loads a few torch.distributed modules; zipsave adds none of them.
    code = (
        "import sys, torch; before = {m for m in sys.modules if m.startswith('torch.distributed')}; "
        "import zipsave; print(sorted(m for m in sys.modules if m.startswith(('torch.distributed', 'zipsave.dcp')) "
        "and m not in before))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_single_process_round_trip_with_values_and_views(tmp_path):
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    state = {
        "t": {
            "view": base[1:3, 2:5],
            "transposed": base.t(),
            "bf16": torch.randn(5, dtype=torch.bfloat16),
            "scalar": torch.tensor(3),
            "empty": torch.zeros(0, 3),
        },
        "meta": {"lr": 0.1, "names": ["a", "b"]},
    }
    zipsave.dcp.save(state, tmp_path / "ckpt")
    target = {
        "t": {
            "view": torch.zeros(2, 3, dtype=torch.float64),
            "transposed": torch.zeros(6, 4, dtype=torch.float64),
            "bf16": torch.zeros(5, dtype=torch.bfloat16),
            "scalar": torch.tensor(0),
            "empty": torch.ones(0, 3),
        },
        "meta": {"lr": 0.0, "names": []},
    }
    zipsave.dcp.load(target, tmp_path / "ckpt")
    for key, value in state["t"].items():
        assert torch.equal(target["t"][key], value), key
    assert target["meta"] == {"lr": 0.1, "names": ["a", "b"]}


def test_metadata_is_json_and_tampering_is_refused(tmp_path):
    zipsave.dcp.save({"w": torch.ones(3)}, tmp_path / "ckpt")
    index = tmp_path / "ckpt" / "index.zip"
    with zipfile.ZipFile(index) as zf:
        doc = json.loads(zf.read("dcp_metadata.json"))
        manifest = zf.read("manifest.json")
    assert doc["state_dict_metadata"]["w"]["chunks"] == [{"offsets": [0], "sizes": [3]}]
    # Edit the JSON as a person with a zip tool would: the manifest's SHA-256 catches it.
    doc["state_dict_metadata"]["w"]["size"] = [4]
    with zipfile.ZipFile(index, "w") as zf:
        zf.writestr("dcp_metadata.json", json.dumps(doc))
        zf.writestr("manifest.json", manifest)
    target = {"w": torch.zeros(3)}
    with pytest.raises(
        zipsave.IntegrityError, match=re.escape("member `dcp_metadata.json`: differs from manifest.json")
    ):
        zipsave.dcp.load(target, tmp_path / "ckpt")


def test_unknown_dtype_in_metadata_is_an_archive_error():
    from zipsave.dcp._metadata import from_json

    doc = {
        "format": "zipsave-dcp",
        "format_version": 1,
        "ranks": [],
        "storage_data": [],
        "state_dict_metadata": {
            "w": {
                "type": "tensor",
                "dtype": "__import__",
                "size": [1],
                "layout": "strided",
                "memory_format": "contiguous_format",
                "requires_grad": False,
                "pin_memory": False,
                "chunks": [],
            }
        },
    }
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("names an unknown dtype '__import__'")):
        from_json(doc, "index.zip/dcp_metadata.json")


def test_pickled_objects_are_refused_unless_allowed(tmp_path):
    zipsave.dcp.save({"obj": Unlisted(7), "w": torch.ones(2)}, tmp_path / "ckpt")
    target = {"obj": None, "w": torch.zeros(2)}
    with pytest.raises(zipsave.UnsafeGlobalError, match=re.escape("Unlisted")):
        zipsave.dcp.load(target, tmp_path / "ckpt")
    zipsave.dcp.load(target, tmp_path / "ckpt", allow_pickle=True)
    assert target["obj"].x == 7


def test_no_committed_checkpoint(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("holds no `index.zip`")):
        zipsave.dcp.load({"w": torch.zeros(1)}, tmp_path / "empty")
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("is neither a zipsave DCP checkpoint")):
        zipsave.dcp.consolidate(tmp_path / "empty", tmp_path / "x.zip")


def test_resaving_removes_the_previous_save(tmp_path):
    writer = zipsave.dcp.ZipWriter(tmp_path / "ckpt")
    import warnings

    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"w": torch.ones(2)}, storage_writer=writer, no_dist=True)
        first = sorted(os.listdir(tmp_path / "ckpt"))
        dcp.save({"w": torch.full((2,), 2.0)}, storage_writer=writer, no_dist=True)  # same writer object
    second = sorted(os.listdir(tmp_path / "ckpt"))
    assert len(first) == len(second) == 2 and first[1] != second[1]
    target = {"w": torch.zeros(2)}
    zipsave.dcp.load(target, tmp_path / "ckpt")
    assert target["w"].tolist() == [2.0, 2.0]


def test_ordinary_archive_loads_slices(tmp_path):
    model = torch.nn.Linear(8, 6)
    zipsave.save({"model": model}, tmp_path / "m.zip")
    # Narrow targets through a planner-free path: load the whole thing, then compare slices.
    target = {"model": {"weight": torch.zeros(6, 8), "bias": torch.zeros(6)}}
    zipsave.dcp.load(target, tmp_path / "m.zip")
    assert torch.equal(target["model"]["weight"], model.weight.detach())
    assert torch.equal(target["model"]["bias"], model.bias.detach())


@pytest.mark.parametrize(
    ("shape", "offsets", "lengths"),
    [
        ((4, 6), (1, 0), (2, 6)),
        ((4, 6), (0, 2), (4, 3)),
        ((2, 3, 4), (1, 1, 0), (1, 2, 4)),
        ((5,), (2,), (3,)),
        ((), (), ()),
        ((3, 0), (0, 0), (3, 0)),
    ],
)
def test_runs_cover_exactly_the_slice(shape, offsets, lengths):
    full = torch.arange(max(1, torch.Size(shape).numel()), dtype=torch.int32)[: torch.Size(shape).numel()]
    full = full.reshape(shape)
    raw = full.numpy().tobytes()
    got = b"".join(raw[start : start + n] for start, n in runs(shape, offsets, lengths, 4))
    expected = full
    for dim, (o, n) in enumerate(zip(offsets, lengths)):
        expected = expected.narrow(dim, o, n)
    assert got == expected.contiguous().numpy().tobytes()


def _flip_a_tensor_byte(folder) -> str:
    rank = next(n for n in sorted(os.listdir(folder)) if n.startswith("rank-"))
    path = os.path.join(folder, rank)
    with open(path, "rb") as f:
        payload = bytearray(f.read())
    at = payload.find(torch.arange(1, 5, dtype=torch.float32).numpy().tobytes())  # inside the tensor's bytes
    assert at > 0
    payload[at] ^= 0xFF
    with open(path, "wb") as f:
        f.write(bytes(payload))
    return path


@pytest.mark.parametrize("entry", ["consolidate", "load"])
def test_a_damaged_rank_archive_is_zipsaves_integrity_error(tmp_path, entry):
    """DCP wraps a rank's failure in CheckpointException, a BaseException: `except Exception`
    would miss it. zipsave's entry points raise zipsave's error, naming the rank archive."""
    zipsave.dcp.save({"model": {"w": torch.arange(1000, dtype=torch.float32)}, "step": 3}, tmp_path / "ck")
    damaged = _flip_a_tensor_byte(tmp_path / "ck")
    try:
        if entry == "consolidate":
            zipsave.dcp.consolidate(tmp_path / "ck", tmp_path / "one.zip")
        else:
            zipsave.dcp.load({"model": {"w": torch.zeros(1000)}, "step": 0}, tmp_path / "ck")
    except Exception as err:  # noqa: BLE001 - what a caller's `except Exception` sees
        caught = err
    else:
        pytest.fail("no error")
    assert isinstance(caught, zipsave.IntegrityError), repr(caught)
    assert caught.archive == damaged and "CRC-32" in str(caught)
    assert not (tmp_path / "one.zip").exists()


def test_another_failure_of_dcp_is_a_zipsave_error_too(tmp_path):
    zipsave.dcp.save({"model": {"w": torch.arange(4.0)}}, tmp_path / "ck")
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("the DCP load failed (rank 0: ")):
        zipsave.dcp.load({"model": {"w": torch.zeros(5)}}, tmp_path / "ck")  # another shape
