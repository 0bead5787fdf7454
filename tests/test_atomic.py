"""Saving is atomic and durable: a save killed at any moment, or failing with an exception,
leaves the previous archive whole at the target path, and no partial archive there."""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import zipsave
from zipsave._archive import _files as _archive
from zipsave._tools import verify

REPO = Path(__file__).resolve().parents[1]
TMP_SUFFIX = ".zipsave-tmp"

CHILD = textwrap.dedent(
    """
    import sys, time
    import torch
    import zipsave

    # ~320 MB of parameters, so the save takes long enough to be interrupted.
    big = torch.nn.ParameterDict(
        {f"w{i}": torch.nn.Parameter(torch.full((8 << 20,), float(i))) for i in range(10)}
    )
    state = {"step": 1, "policy": big}
    print("saving", flush=True)
    start = time.monotonic()
    zipsave.save(state, sys.argv[1])
    print(f"saved {time.monotonic() - start:.3f}", flush=True)
    """
)


def old_state() -> dict:
    torch.manual_seed(0)
    return {"step": 0, "policy": torch.nn.Linear(3, 2)}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(folder: Path, target: Path) -> list[str]:
    """Files other than the target; only zipsave's hidden temporary files are allowed."""
    others = sorted(p.name for p in folder.iterdir() if p != target)
    for name in others:
        assert name.startswith(f".{target.name}.") and name.endswith(TMP_SUFFIX), name
    return others


def assert_old_archive(target: Path, expected_digest: str) -> None:
    assert digest(target) == expected_digest
    assert verify(target) == []
    loaded = zipsave.load(target)
    assert loaded["step"] == 0
    assert torch.equal(loaded["policy"]["weight"], old_state()["policy"].weight)


def start_child(target: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(target)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    line = proc.stdout.readline()
    assert line == "saving\n", line + proc.stderr.read()
    return proc


@pytest.mark.slow
def test_sigkill_during_save_leaves_the_previous_archive(tmp_path):
    target = tmp_path / "model.zip"

    # Calibrate: how long a full save takes here, and how large the new archive is.
    probe = tmp_path / "probe" / "model.zip"
    probe.parent.mkdir()
    proc = start_child(probe)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    duration = float(out.split()[1])
    new_size = probe.stat().st_size
    assert verify(probe) == []
    probe.unlink()
    probe.parent.rmdir()

    zipsave.save(old_state(), target)
    old_digest, old_size = digest(target), target.stat().st_size
    killed_mid_save = 0
    # Six points across the calibrated save; where this save runs faster than the calibration
    # (a warm page cache), more early points until three kills have landed inside it.
    for attempt, fraction in enumerate((0.02, 0.2, 0.5, 0.8, 0.95, 1.1, 0.1, 0.3, 0.05, 0.4, 0.15, 0.25)):
        if attempt >= 6 and killed_mid_save >= 3:
            break
        proc = start_child(target)
        deadline = time.monotonic() + fraction * duration
        # Meanwhile the target is always one whole archive: the old one or the new one.
        while time.monotonic() < deadline and proc.poll() is None:
            assert target.stat().st_size in (old_size, new_size)
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        if proc.returncode == -signal.SIGKILL and target.stat().st_size == old_size:
            killed_mid_save += 1
            assert_old_archive(target, old_digest)
        else:
            # The kill came after the replace: the new archive must be whole.
            assert target.stat().st_size == new_size
            assert verify(target) == []
            zipsave.save(old_state(), target)  # put the old one back for the next round
            assert digest(target) == old_digest
        for name in leftovers(tmp_path, target):
            (tmp_path / name).unlink()  # a SIGKILL cannot clean up its temporary file
    assert killed_mid_save >= 3, "too few kills landed inside the save to mean anything"


class _Explodes:
    """A state dict value that fails while torch.save writes it (after the archive began)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __reduce__(self):
        raise self.error


class _Stateful:
    def __init__(self, state) -> None:
        self.state = state

    def state_dict(self):
        if isinstance(self.state, BaseException):
            raise self.state
        return self.state

    def load_state_dict(self, state) -> None:
        self.state = state


@pytest.fixture
def previous(tmp_path):
    target = tmp_path / "model.zip"
    zipsave.save(old_state(), target)
    return target, digest(target)


def assert_untouched(target: Path, old_digest: str) -> None:
    assert_old_archive(target, old_digest)
    assert sorted(os.listdir(target.parent)) == [target.name], "a temporary file was left behind"


def test_unencodable_value_fails_before_writing(previous):
    import threading

    target, old_digest = previous
    # a live handle in an app state is refused by name (it used to reach the pickler)
    with pytest.raises(zipsave.EncodeError, match=re.escape("key `lock`: holds _thread.lock, a live handle")):
        zipsave.save({"step": 1, "lock": threading.Lock()}, target)
    assert_untouched(target, old_digest)


def test_state_dict_that_raises_leaves_the_previous_archive(previous):
    target, old_digest = previous
    with pytest.raises(
        zipsave.EncodeError,
        match=re.escape("key `thing`: `thing.state_dict()` failed (RuntimeError: state_dict failed)"),
    ):
        zipsave.save({"step": 1, "thing": _Stateful(RuntimeError("state_dict failed"))}, target)
    assert_untouched(target, old_digest)


@pytest.mark.parametrize(
    "error",
    [pickle.PicklingError("cannot pickle this"), KeyboardInterrupt(), MemoryError()],
    ids=["pickling-error", "keyboard-interrupt", "memory-error"],
)
def test_failure_while_writing_removes_the_temporary_file(previous, error):
    target, old_digest = previous
    big = torch.zeros(1 << 20)  # the archive is well under way when the error comes
    with pytest.raises(type(error)):
        zipsave.save({"step": 1, "thing": _Stateful({"big": big, "bad": _Explodes(error)})}, target)
    assert_untouched(target, old_digest)


def test_failed_fsync_leaves_the_previous_archive(previous, monkeypatch):
    target, old_digest = previous

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_archive.os, "fsync", no_space)
    with pytest.raises(OSError, match=re.escape("No space left on device")):
        zipsave.save({"step": 1, "policy": torch.nn.Linear(3, 2)}, target)
    monkeypatch.undo()
    assert_untouched(target, old_digest)


def test_save_fsyncs_the_file_and_the_folder(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else fd)
        real_fsync(fd)

    monkeypatch.setattr(_archive.os, "fsync", spy)
    zipsave.save(old_state(), tmp_path / "model.zip")
    if sys.platform.startswith("linux"):
        assert len(synced) == 2
        assert synced[0].endswith(TMP_SUFFIX)  # the data, before the rename
        assert synced[1] == str(tmp_path.resolve())  # the folder, after it
    else:
        assert len(synced) >= 1


def test_replace_keeps_the_permissions_of_the_previous_archive(previous):
    target, _ = previous
    os.chmod(target, 0o600)
    zipsave.save(old_state(), target)
    assert target.stat().st_mode & 0o777 == 0o600


def test_a_save_that_is_not_durable_syncs_nothing_and_is_still_atomic(previous, monkeypatch):
    target, old_digest = previous
    synced = []
    monkeypatch.setattr(_archive.os, "fsync", synced.append)
    big = torch.zeros(1 << 20)
    with pytest.raises(MemoryError):
        zipsave.save(
            {"step": 1, "thing": _Stateful({"big": big, "bad": _Explodes(MemoryError())})}, target, durable=False
        )
    assert_untouched(target, old_digest)
    zipsave.save({"step": 2, "policy": torch.nn.Linear(3, 2)}, target, durable=False)
    assert synced == []
    assert zipsave.load_archive(target)[0]["step"] == 2
    assert sorted(os.listdir(target.parent)) == [target.name]


def test_large_durable_saves_start_the_disk_early_and_write_the_same_bytes(tmp_path, monkeypatch):
    if _archive._sync_file_range() is None:
        pytest.skip("sync_file_range is Linux's")
    state = {"step": 1, "policy": torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.Linear(2048, 2048))}
    zipsave.save(state, tmp_path / "plain.zip", durable=False)
    kicks = []
    real = _archive._sync_file_range()
    monkeypatch.setattr(_archive, "_sync_file_range", lambda: lambda *args: kicks.append(args) or real(*args))
    zipsave.save(state, tmp_path / "durable.zip")
    # each kick starts the write-out of the bytes written since the previous one: back to back
    assert len(kicks) >= 2 and all(args[3] == 2 for args in kicks)
    assert kicks[0][1] == 0 and all(a[1] + a[2] == b[1] for a, b in zip(kicks, kicks[1:]))
    assert digest(tmp_path / "durable.zip") == digest(tmp_path / "plain.zip")


def test_replacing_an_archive_releases_the_previous_one(previous):
    import threading

    target, _ = previous
    fds = set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for step in range(3):
        zipsave.save({"step": step, "policy": torch.nn.Linear(3, 2)}, target)
    for thread in threading.enumerate():
        if thread.name == "zipsave-release":
            thread.join(timeout=30)
    if fds is not None:
        assert set(os.listdir("/proc/self/fd")) <= fds  # no descriptor of a replaced archive stays open
    assert zipsave.load_archive(target)[0]["step"] == 2


def test_a_reader_of_the_previous_archive_keeps_reading_it(previous):
    target, old_digest = previous
    with open(target, "rb") as reader:
        zipsave.save({"step": 9, "policy": torch.nn.Linear(3, 2)}, target)
        assert hashlib.sha256(reader.read()).hexdigest() == old_digest
