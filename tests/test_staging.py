"""GPU paths (issue 18.5): records go to device memory through two pinned staging buffers,
never as a full CPU copy. The staging logic is tested on the CPU everywhere; the CUDA tests
run only where CUDA is available."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

import zipsave
from zipsave._archive import OrderedCrc
from zipsave._tensors._staging import Stager
from zipsave._tensors._tree import BufferView

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")


def test_stager_copies_in_pieces_and_feeds_the_checksums():
    data = bytearray(np.random.default_rng(0).integers(0, 255, 5_000_123, dtype=np.uint8).tobytes())
    view = BufferView(data)
    stager = Stager(torch.device("cpu"), piece=1 << 20)
    dest = torch.empty(4_000_000, dtype=torch.uint8)
    crcs = [OrderedCrc(), OrderedCrc()]
    stager.read_into(view, 1000, 4_000_000, dest, crcs)
    stager.finish()
    assert stager.pieces == 4  # 1 MiB pieces: never a full host copy of the record
    assert bytes(dest.numpy()) == bytes(data[1000:4_001_000])
    assert crcs[0].value() == crcs[1].value() == zlib.crc32(data[1000:4_001_000])
    assert all(b.numel() == 1 << 20 for b in stager._buffers)


def test_stager_refuses_a_short_member():
    view = BufferView(bytearray(100))
    with pytest.raises(zipsave.ArchiveFormatError, match="ends inside a storage record"):
        Stager(torch.device("cpu"), piece=64).read_into(view, 0, 200, torch.empty(200, dtype=torch.uint8), [])


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(800, 800), torch.nn.Linear(800, 2))


@CUDA
def test_load_archive_to_cuda(tmp_path):
    path = tmp_path / "m.zip"
    zipsave.save_archive(path, data={}, params={"policy": _net().state_dict()})
    params = zipsave.load_archive(path, device="cuda")[1]["policy"]
    for key, value in _net().state_dict().items():
        assert params[key].device.type == "cuda" and torch.equal(params[key].cpu(), value)


@CUDA
def test_restore_into_cuda_tensors_and_save_from_them(tmp_path):
    path = tmp_path / "m.zip"
    zipsave.save({"policy": _net().cuda()}, path)
    live = torch.nn.Sequential(torch.nn.Linear(800, 800), torch.nn.Linear(800, 2)).cuda()
    before = live[0].weight.data_ptr()
    zipsave.restore({"policy": live}, path)
    assert live[0].weight.data_ptr() == before  # filled in place on the device
    assert all(torch.equal(a.cpu(), b) for a, b in zip(live.state_dict().values(), _net().state_dict().values()))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback of a machine without CUDA")
def test_cuda_asked_for_without_cuda_loads_on_the_cpu(tmp_path):
    # SB3's rule: device="cuda" on a machine without CUDA falls back to the CPU.
    zipsave.save({"policy": _net()}, tmp_path / "m.zip")
    params = zipsave.load_archive(tmp_path / "m.zip", device="cuda")[1]["policy"]
    assert all(t.device.type == "cpu" for t in params.values())


@pytest.mark.parametrize("device", ["bogus", "cuda:x", 3.5])
def test_an_invalid_device_is_named_before_any_read(tmp_path, device):
    zipsave.save({"policy": _net()}, tmp_path / "m.zip")
    with pytest.raises(ValueError, match="is not a torch device") as info:
        zipsave.load(tmp_path / "m.zip", device=device)
    assert not isinstance(info.value, zipsave.IntegrityError)  # the archive is fine


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="needs a machine without Metal")
def test_a_device_this_machine_lacks_is_named_not_blamed_on_the_archive(tmp_path):
    zipsave.save({"policy": _net()}, tmp_path / "m.zip")
    for call in (zipsave.load, zipsave.load_archive):
        with pytest.raises(ValueError, match="'mps' is not available on this machine") as info:
            call(tmp_path / "m.zip", device="mps")
        assert not isinstance(info.value, zipsave.IntegrityError)


def test_mmap_with_the_auto_device_stays_on_the_cpu(monkeypatch):
    """A mapping lives in host memory: ``mmap=True`` with ``device="auto"`` keeps tensors mapped
    on the CPU where CUDA is available."""
    from zipsave._tensors._device import get_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert get_device("auto", mmap=True).type == "cpu"
    assert get_device(None, mmap=True).type == "cpu"
