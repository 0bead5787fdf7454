"""Faults of the storage get zipsave's errors: a full disk (a file object raising ENOSPC mid-write,
and a small tmpfs where the tests may mount one) is a StorageError that is also an OSError, names
the archive, the member being written and the cause, and leaves the previous archive whole and no
temporary file behind."""

from __future__ import annotations

import errno
import io
import os
import re
import subprocess

import pytest
import torch

import zipsave


class FullDisk(io.BytesIO):
    """A file object with room for ``room`` bytes, then ENOSPC."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def write(self, b) -> int:
        if self.tell() + memoryview(b).nbytes > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(b)


def _state():
    torch.manual_seed(0)
    return {"net": torch.nn.Linear(64, 64), "lr": 0.1}


def test_enospc_mid_write_is_a_storage_error_naming_the_member():
    with pytest.raises(
        zipsave.StorageError,
        match=re.escape("member `net.pth`: could not be written (OSError: [Errno 28] No space left on device)"),
    ) as err:
        zipsave.save(_state(), FullDisk(8000))
    assert isinstance(err.value, OSError) and isinstance(err.value, zipsave.ZipsaveError)
    assert err.value.errno == errno.ENOSPC
    assert err.value.member == "net.pth"


@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_full_tmpfs_keeps_the_previous_archive_and_leaves_no_temporary_file(small_tmpfs):
    path = small_tmpfs / "model.zip"
    zipsave.save({"lr": 0.5}, path)
    before = path.read_bytes()
    big = {"net": torch.nn.Linear(256, 256), "lr": 0.1}  # ~260 KB, more than the tmpfs holds
    with pytest.raises(
        zipsave.StorageError,
        match=re.escape(f"archive `{path}`, member `net.pth`: could not be written (OSError: [Errno 28]"),
    ) as err:
        zipsave.save(big, path)
    assert err.value.errno == errno.ENOSPC
    assert path.read_bytes() == before
    assert sorted(os.listdir(small_tmpfs)) == ["model.zip"]
    assert zipsave.load(path)["lr"] == 0.5


def test_a_full_disk_says_so_in_the_users_words():
    # the error quoted only "(OSError: [Errno 28] No space left on device)"
    with pytest.raises(
        zipsave.StorageError, match=re.escape("is unchanged. The disk is full: free space on it, or save elsewhere.")
    ):
        zipsave.save(_state(), FullDisk(8000))
