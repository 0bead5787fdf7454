"""Zero-copy loads (issue 18.2): ``mmap=True`` backs tensors by the archive's own pages,
copy-on-write, checked once by default; a later atomic save leaves old mappings valid; a
truncation by another program is a SIGBUS on access (documented in docs/usage.rst)."""

from __future__ import annotations

import json
import pathlib
import re
import signal
import struct
import subprocess
import sys
import zipfile

import pytest
import torch

import zipsave
from zipsave._archive import ArchiveSource
from zipsave._tensors import load_member
from zipsave.exceptions import IntegrityError


def _net(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(700, 700), torch.nn.Linear(700, 3))


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "model.zip"
    zipsave.save_archive(path, data={"gamma": 0.9}, params={"policy": _net().state_dict()})
    return path


def _is_mapped(t: torch.Tensor, path) -> bool:
    """Whether the tensor's memory lies in a mapping of ``path`` (from /proc/self/maps)."""
    ptr = t.untyped_storage().data_ptr()
    for line in pathlib.Path("/proc/self/maps").read_text().splitlines():
        span, *rest = line.split()
        lo, hi = (int(x, 16) for x in span.split("-"))
        if lo <= ptr < hi:
            return rest[-1] == str(path) if len(rest) >= 5 else False
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/maps to see the mapping")
def test_load_archive_mmap_is_backed_by_the_file_and_copy_on_write(saved):
    _, params, _ = zipsave.load_archive(saved, mmap=True)
    weight = params["policy"]["0.weight"]
    assert _is_mapped(weight, saved)
    assert torch.equal(weight, _net().state_dict()["0.weight"])
    weight.add_(1.0)  # private pages: the file does not change
    _, again, _ = zipsave.load_archive(saved, mmap=True)
    assert torch.equal(again["policy"]["0.weight"], _net().state_dict()["0.weight"])
    copied = zipsave.load_archive(saved)[1]["policy"]["0.weight"]
    assert not _is_mapped(copied, saved)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/maps to see the mapping")
def test_read_mmap(saved):
    weight = zipsave.read(saved, "policy/0.weight", mmap=True)
    assert _is_mapped(weight, saved) and torch.equal(weight, _net().state_dict()["0.weight"])
    assert not _is_mapped(zipsave.read(saved, "policy/0.weight"), saved)


def _corrupt(path, tmp_path) -> pathlib.Path:
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("policy.pth")
        rec = json.loads(z.read("manifest.json"))["members"]["policy.pth"]["records"]["data/0"]
    raw = bytearray(pathlib.Path(path).read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    raw[info.header_offset + 30 + name_len + extra_len + rec["offset"] + 8] ^= 0x10
    bad = tmp_path / "bad.zip"
    bad.write_bytes(bytes(raw))
    return bad


def test_mmap_load_is_verified_unless_asked_not_to(saved, tmp_path):
    bad = _corrupt(saved, tmp_path)
    with ArchiveSource(bad) as src, pytest.raises(IntegrityError, match=re.escape("(tensor `0.weight`): CRC-32")):
        load_member(src.reader, "policy.pth", device=torch.device("cpu"), mmap=True)
    with pytest.raises(IntegrityError, match=re.escape("(tensor `0.weight`): CRC-32")):
        zipsave.read(bad, "policy/0.weight", mmap=True)
    with ArchiveSource(bad) as src:  # verify=False: lazy, nothing checked
        tree, _ = load_member(src.reader, "policy.pth", device=torch.device("cpu"), mmap=True, verify=False)
    assert not torch.equal(tree["0.weight"], _net().state_dict()["0.weight"])


def _resident_kib(ptr: int) -> int:
    """The resident KiB of the mapping that holds ``ptr`` (from /proc/self/smaps)."""
    with open("/proc/self/smaps") as smaps:
        lines = iter(smaps)
        for line in lines:
            span = line.split()[0]
            if "-" in span and not line.split()[0].endswith(":"):
                lo, hi = (int(x, 16) for x in span.split("-"))
                if lo <= ptr < hi:
                    return next(int(x.split()[1]) for x in lines if x.startswith("Rss:"))
    raise AssertionError("mapping not found")


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps")
@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "pread"])
def test_a_checked_mapping_leaves_no_page_resident(in_place, tmp_path, monkeypatch):
    """The check unmaps the pages it mapped (or reads them with ``pread``): a checked mapped
    load leaves nothing resident until the caller touches it (issue 37)."""
    import numpy as np

    from zipsave._tensors import _prefault

    monkeypatch.setattr(_prefault, "CHECK_IN_PLACE", in_place)
    monkeypatch.setattr(_prefault, "CHECK_WINDOW", 100_000)  # several windows, none on a page boundary
    path = tmp_path / "big.zip"
    array = np.random.default_rng(0).random(1 << 19)  # 4 MiB: an arrays/<id>.npy member
    zipsave.save_archive(path, data={"frames": array}, params={"policy": _net().state_dict()})
    data, params, _ = zipsave.load_archive(path, mmap=True)
    mapped, weight = data["frames"], params["policy"]["0.weight"]
    assert _resident_kib(mapped.ctypes.data) == 0
    assert _resident_kib(weight.untyped_storage().data_ptr()) == 0
    assert np.array_equal(mapped, array) and torch.equal(weight, _net().state_dict()["0.weight"])
    assert _resident_kib(mapped.ctypes.data) >= array.nbytes // 1024  # touched: now resident
    single = zipsave.read(path, "policy/0.weight", mmap=True)
    assert _resident_kib(single.untyped_storage().data_ptr()) == 0


def test_old_mappings_survive_a_later_save(saved):
    _, params, _ = zipsave.load_archive(saved, mmap=True)
    zipsave.save_archive(saved, data={"gamma": 0.5}, params={"policy": _net(seed=1).state_dict()})
    assert torch.equal(params["policy"]["0.weight"], _net().state_dict()["0.weight"])
    assert torch.equal(zipsave.load_archive(saved)[1]["policy"]["0.weight"], _net(seed=1).state_dict()["0.weight"])


@pytest.mark.skipif(sys.platform != "linux", reason="SIGBUS on a truncated mapping is POSIX behaviour")
def test_truncation_under_a_mapping_is_a_sigbus(saved):
    code = (
        "import os, sys, zipsave;"
        "p = zipsave.load_archive(sys.argv[1], mmap=True)[1]['policy']['0.weight'];"
        "os.truncate(sys.argv[1], 1000);"
        "print(float(p.sum()))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(saved)], capture_output=True, text=True)
    assert done.returncode == -signal.SIGBUS, done.stderr[-2000:]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps")
def test_a_checked_mapping_populates_the_member_pages_in_one_call(tmp_path):
    import mmap

    from zipsave._tensors import _prefault

    path = tmp_path / "bytes.bin"
    path.write_bytes(bytes(range(256)) * 4096)  # 1 MiB, 256 pages
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    start = torch.frombuffer(mapped, dtype=torch.uint8).data_ptr()

    def resident_kib() -> int:
        with open("/proc/self/smaps") as smaps:
            lines = iter(smaps)
            for line in lines:
                if line.split()[0].split("-")[0] == f"{start:x}":
                    return next(int(x.split()[1]) for x in lines if x.startswith("Rss:"))
        raise AssertionError("mapping not found")

    assert resident_kib() == 0
    _prefault.populate_read(mapped, 4096 * 3 + 100, 4096 * 10)  # from inside page 3 to inside page 13
    # those 11 pages at least; the kernel may map the rest of a large page-cache folio with them
    assert 44 <= resident_kib() <= 1024
