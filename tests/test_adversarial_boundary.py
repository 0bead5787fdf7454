"""The error-boundary family (``tests/adversarial/boundaries.py``): every exception type at every
public door, and the real hostile inputs that once escaped as a builtin.

What must hold: a door that reads untrusted bytes raises a ``ZipsaveError`` naming the file,
with the original exception in its cause chain; the command line exits 2 and never calls a
hostile input a zipsave bug; ``MemoryError`` and ``KeyboardInterrupt`` pass as they are; a
caller's own mistake (a path of the wrong type) is not dressed up as the archive's.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import pathlib
import sys
import warnings

import pytest
import torch

import zipsave
from zipsave import cli
from zipsave._archive import ArchiveReader
from zipsave._tools import diff, extract, verify

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from adversarial import boundaries  # noqa: E402


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = cli.main(argv)
    return code, err.getvalue()


def _assert_refused(excinfo: pytest.ExceptionInfo, path: str, cause: type | None = None) -> None:
    err = excinfo.value
    assert isinstance(err, zipsave.ZipsaveError), f"{type(err).__name__}: {err}"
    assert str(path) in str(err), str(err)
    if cause is not None:
        chain = boundaries.cause_chain(err)
        assert any(type(e) is cause for e in chain), [type(e).__name__ for e in chain]
        assert err.__cause__ is not None or err.__context__ is not None


# -- the fault-injection generator -------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("boundary")
    net = torch.nn.Linear(2, 2)
    zipsave.save({"net": net, "lr": 0.5}, root / "a.zip")
    zipsave.save({"net": torch.nn.Linear(2, 2), "lr": 0.25}, root / "b.zip")
    directory = root / "ckpt"
    with zipsave.CheckpointManager(directory, keep_last=2) as manager:
        manager.save(1, {"net": net, "lr": 0.5}, metrics={"r": 1.0})
    return {"archive": str(root / "a.zip"), "other": str(root / "b.zip"), "root": str(root),
            "directory": str(directory)}


def _doors(files: dict[str, str]) -> dict[str, object]:
    archive = files["archive"]
    out = os.path.join(files["root"], "out")
    return {
        "load": lambda: zipsave.load(archive),
        "load_archive": lambda: zipsave.load_archive(archive),
        "read": lambda: zipsave.read(archive, "net/weight"),
        "restore": lambda: zipsave.restore({"net": torch.nn.Linear(2, 2), "lr": 0.0}, archive),
        "inspect": lambda: zipsave.inspect(archive, verify=True),
        "verify": lambda: verify(archive),
        "diff": lambda: diff(archive, files["other"]),
        "extract": lambda: extract(archive, out, overwrite=True),
        "manager_load_latest": lambda: zipsave.CheckpointManager(files["directory"], read_only=True).load_best("r"),
        "dcp_load": lambda: __import__("zipsave.dcp", fromlist=["load"]).load({"lr": 0.0}, archive),
    }


DOOR_NAMES = ["load", "load_archive", "read", "restore", "inspect", "verify", "diff", "extract", "manager_load_latest",
              "dcp_load"]


def _inject(monkeypatch, make) -> None:
    for name in boundaries.READER_METHODS:
        def failing(self, *args, _make=make, **kwargs):
            raise _make()
        monkeypatch.setattr(ArchiveReader, name, failing)


@pytest.mark.parametrize("door", DOOR_NAMES)
@pytest.mark.parametrize("raised", list(boundaries.RAISED))
def test_every_exception_at_every_door_is_a_zipsave_error(door, raised, files, monkeypatch):
    make = boundaries.RAISED[raised]
    _inject(monkeypatch, make)
    call = _doors(files)[door]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as excinfo:
            call()
    where = files["directory"] if door.startswith("manager") else files["archive"]
    if door == "diff" and files["archive"] not in str(excinfo.value):
        where = files["other"]
    _assert_refused(excinfo, where if door != "manager_load_latest" else "step-0000000001.zip", type(make()))


@pytest.mark.parametrize("raised", ["RecursionError", "OverflowError", "AssertionError", "BadZipFile"])
@pytest.mark.parametrize("command", [("inspect", "{archive}"), ("verify", "{archive}"), ("diff", "{archive}", "{other}"),
                                     ("extract", "--overwrite", "{archive}", "{root}/cli-out")])
def test_the_command_line_never_calls_a_hostile_input_a_bug(command, raised, files, monkeypatch):
    _inject(monkeypatch, boundaries.RAISED[raised])
    code, err = _run([part.format(**files) for part in command])
    assert code == 2, err
    assert "please report" not in err, err
    assert files["archive"] in err, err


@pytest.mark.parametrize("passing", [MemoryError, KeyboardInterrupt])
def test_memory_errors_and_interrupts_pass_as_they_are(passing, files, monkeypatch):
    _inject(monkeypatch, passing)
    with pytest.raises(passing):
        zipsave.load(files["archive"])


def test_a_callers_own_mistake_stays_the_callers(files):
    with pytest.raises(TypeError, match="expected str, bytes or os.PathLike object"):
        zipsave.load(12345)
    with pytest.raises(FileNotFoundError):
        zipsave.load(os.path.join(files["root"], "missing.zip"))


def test_a_zipsave_error_without_an_archive_is_given_one(files, monkeypatch):
    def failing(self, *args, **kwargs):
        raise zipsave.DecodeError("no archive named here.")
    monkeypatch.setattr(ArchiveReader, "read", failing)
    with pytest.raises(zipsave.DecodeError, match=r"^archive `") as excinfo:
        zipsave.load_archive(files["archive"])
    assert excinfo.value.archive == files["archive"]


# -- the checkpoint index ------------------------------------------------------------------------
def _index_doors(directory: str) -> dict[str, object]:
    return {
        "manager": lambda: zipsave.CheckpointManager(directory, keep_last=2).close(),
        "read_only": lambda: zipsave.CheckpointManager(directory, read_only=True).list(),
    }


@pytest.mark.parametrize("door", ["manager", "read_only", "cli_list"])
@pytest.mark.parametrize("entry", ["nested_100000", *boundaries.INDEX_ENTRIES])
def test_a_hostile_checkpoint_index_is_a_checkpoint_directory_error(door, entry, tmp_path):
    directory = tmp_path / "ckpt"
    directory.mkdir()
    if entry == "nested_100000":
        boundaries.nested_index(str(directory))
    else:
        boundaries.index_with(str(directory), **boundaries.INDEX_ENTRIES[entry])
    (directory / "step-0000000001.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    if door == "cli_list":
        code, err = _run(["list", str(directory)])
        assert code == 2, err
        assert "please report" not in err and "zipsave-checkpoints.json" in err, err
        return
    with pytest.raises(zipsave.CheckpointDirectoryError, match=re.escape("index `zipsave-checkpoints.json`")) as excinfo:
        _index_doors(str(directory))[door]()
    assert excinfo.value.__cause__ is not None
    assert str(directory) in str(excinfo.value)


def test_the_index_still_reads_what_a_manager_writes(files):
    listed = zipsave.CheckpointManager(files["directory"], read_only=True).list()
    assert [c.step for c in listed] == [1]
    assert listed[0].metrics == {"r": 1.0}


# -- extract -------------------------------------------------------------------------------------
@pytest.mark.parametrize("tree", list(boundaries.EXTRACT_TREES))
def test_extract_refuses_what_it_cannot_write_before_writing(tree, tmp_path):
    archive = boundaries.zip_of(str(tmp_path / "t.zip"), boundaries.EXTRACT_TREES[tree])
    out = tmp_path / "out"
    with pytest.raises(zipsave.ArchiveFormatError) as excinfo:
        extract(archive, out)
    assert archive in str(excinfo.value)
    assert "\x1b" not in str(excinfo.value)
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*")), "wrote before refusing"
    code, err = _run(["extract", archive, str(tmp_path / "cli-out")])
    assert code == 2 and "please report" not in err, err


def test_extract_names_the_member_a_file_system_refuses(tmp_path, monkeypatch):
    archive = boundaries.zip_of(str(tmp_path / "t.zip"), ["a/b", "c"])

    def refusing(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "open", refusing)
    with pytest.raises(zipsave.StorageError, match=re.escape("member `a/b`: could not be extracted (OSError: [Errno 28]")) as excinfo:
        extract(archive, tmp_path / "out")
    assert excinfo.value.errno == 28

