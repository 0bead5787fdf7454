"""CheckpointManager and ``zipsave list`` as new users drive them: odd paths and step types,
directories changed by hand, broken newest checkpoints on resume, misspelt ``keep_best``
metrics, and what the command says about inputs that are not checkpoint directories."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import zipsave
from zipsave.cli import main

INDEX = "zipsave-checkpoints.json"
LOCK = "zipsave-checkpoints.lock"


def state(value: float = 0.0, step: int = 0) -> dict:
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.fill_(value)
        model.bias.fill_(value)
    return {"model": model, "step": step}


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != LOCK)


def name(step: int) -> str:
    return f"step-{step:010d}.zip"


# -- paths and steps -----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [str, Path])
def test_folders_with_spaces_and_unicode_relative_or_not(tmp_path, monkeypatch, kind):
    monkeypatch.chdir(tmp_path)
    folder = kind("runs/a run ✓/ünï")
    with zipsave.CheckpointManager(folder, every_steps=1, background=False) as manager:
        manager.save(1, state(1.0, 1))
    assert manager.list()[0].path == str(tmp_path / "runs" / "a run ✓" / "ünï" / name(1))
    assert files(tmp_path / "runs" / "a run ✓" / "ünï") == [name(1), INDEX]


@pytest.mark.parametrize("step", [np.int64(3), np.uint32(3), torch.tensor(3)])
def test_numpy_and_tensor_integer_steps_are_steps(tmp_path, step):
    with zipsave.CheckpointManager(tmp_path, every_steps=1, background=False) as manager:
        assert manager.due(step)
        checkpoint = manager.save(step, state(), metrics={"step": step})
    assert type(checkpoint.step) is int and checkpoint.step == 3
    assert json.loads((tmp_path / INDEX).read_text())["checkpoints"][0]["step"] == 3


@pytest.mark.parametrize("step", [3.0, True, -1, "3"])
def test_other_steps_are_refused(tmp_path, step):
    with zipsave.CheckpointManager(tmp_path) as manager:
        with pytest.raises(ValueError, match=re.escape(f"`step` must be a non-negative integer, got {step!r}.")):
            manager.save(step, state())


def test_a_file_is_not_a_checkpoint_directory(tmp_path):
    archive = tmp_path / "model.zip"
    zipsave.save(state(), archive)
    before = archive.read_bytes()
    with pytest.raises(zipsave.CheckpointDirectoryError, match=re.escape(f"`{archive}` is a file, not a checkpoint directory.")):
        zipsave.CheckpointManager(archive)
    below = archive / "run"
    with pytest.raises(
        zipsave.CheckpointDirectoryError,
        match=re.escape(f"checkpoint directory `{below}` lies below `{archive}`, which is a file."),
    ):
        zipsave.CheckpointManager(below)
    assert archive.read_bytes() == before


def test_cli_list_names_a_missing_folder_and_a_file(tmp_path, capsys):
    archive = tmp_path / "model.zip"
    zipsave.save(state(), archive)
    assert main(["list", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"zipsave: error: checkpoint directory `{tmp_path / 'nope'}` does not exist.\n"
    assert main(["list", str(archive)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"zipsave: error: `{archive}` is a file, not a checkpoint directory.")
    assert f"`zipsave inspect {archive}` looks inside an archive." in err
    (tmp_path / "empty").mkdir()
    assert main(["list", str(tmp_path / "empty")]) == 2
    assert "has no `zipsave-checkpoints.json`" in capsys.readouterr().err


# -- a directory changed by hand -----------------------------------------------------------------
def test_checkpoints_deleted_by_hand_are_dropped_from_the_index_with_a_warning(tmp_path, capsys):
    with zipsave.CheckpointManager(tmp_path, keep_best=("reward", "max"), background=False) as manager:
        for step in (1, 2, 3):
            manager.save(step, state(float(step), step), metrics={"reward": float(step)})
    (tmp_path / name(2)).unlink()
    (tmp_path / name(3)).unlink()

    with warnings.catch_warnings():
        warnings.simplefilter("always", zipsave.ZipsaveWarning)  # the command shows them as lines
        assert main(["list", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"{tmp_path}: 3 checkpoints")
    assert err == (
        f"zipsave: warning: `{tmp_path}`: the index lists steps 2, 3, whose archives are gone (deleted by "
        "hand?); a CheckpointManager drops them from the index when it opens the directory.\n"
    )

    expected = f"checkpoint directory `{tmp_path}`: the index listed steps 2, 3, whose archives are gone"
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape(expected)):
        manager = zipsave.CheckpointManager(tmp_path, keep_best=("reward", "max"), background=False)
    with manager:
        assert [c.step for c in manager.list()] == [1]
        assert manager.best().step == 1
        app = state()
        assert manager.restore_latest(app).step == 1 and app["step"] == 1
        manager.save(2, state(2.0, 2), metrics={"reward": 0.5})
        assert [c.step for c in manager.list()] == [1, 2]
    assert [c["step"] for c in json.loads((tmp_path / INDEX).read_text())["checkpoints"]] == [1, 2]
    assert main(["list", str(tmp_path)]) == 0
    assert capsys.readouterr().err == ""


def test_cli_list_json_is_strict_json_with_non_finite_metrics(tmp_path, capsys):
    with zipsave.CheckpointManager(tmp_path, background=False) as manager:
        manager.save(1, state(), metrics={"loss": float("nan"), "low": float("-inf"), "high": np.float32("inf"), "tag": "x"})
    assert main(["list", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out

    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    listed = json.loads(out, parse_constant=refuse)
    assert listed[0]["metrics"] == {"loss": "NaN", "low": "-Infinity", "high": "Infinity", "tag": "x"}
    assert main(["list", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[-4:] == ["nan", "-inf", "inf", "x"]
