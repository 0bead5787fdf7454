"""CheckpointManager and ``zipsave list`` as new users drive them: odd paths and step types,
directories changed by hand, broken newest checkpoints on resume, misspelt ``keep_best``
metrics, and what the command says about inputs that are not checkpoint directories."""

from __future__ import annotations

import io
import json
import logging
import re
import warnings
import zipfile
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
    with pytest.raises(
        zipsave.CheckpointDirectoryError, match=re.escape(f"`{archive}` is a file, not a checkpoint directory.")
    ):
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
        warnings.simplefilter("error")  # as PYTHONWARNINGS=error: the command still shows them as lines
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
        manager.save(
            1, state(), metrics={"loss": float("nan"), "low": float("-inf"), "high": np.float32("inf"), "tag": "x"}
        )
    assert main(["list", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out

    def refuse(token):
        raise ValueError(f"not strict JSON: {token}")

    listed = json.loads(out, parse_constant=refuse)
    assert listed[0]["metrics"] == {"loss": "NaN", "low": "-Infinity", "high": "Infinity", "tag": "x"}
    assert main(["list", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[-4:] == ["nan", "-inf", "inf", "x"]


# -- resuming when the newest checkpoint is broken -----------------------------------------------
def truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(200)


def bit_rot(path: Path, value: float) -> None:
    """Change one stored weight, as a failing disk would: the archive stays a valid zip."""
    raw = path.read_bytes()
    weight = torch.full((3,), value).numpy().tobytes()
    assert raw.count(weight) >= 1
    path.write_bytes(raw.replace(weight, torch.full((3,), value + 1).numpy().tobytes(), 1))


def run_to(folder, last: int, **kwargs) -> None:
    with zipsave.CheckpointManager(folder, every_steps=10, **kwargs) as manager:
        for step in range(1, last + 1):
            manager.save(step, state(float(step), step))


def test_restore_latest_falls_back_past_damaged_checkpoints_and_the_run_goes_on(tmp_path, capsys):
    run_to(tmp_path, 40, keep_last=3)
    truncate(tmp_path / name(40))
    bit_rot(tmp_path / name(30), 30.0)
    with zipsave.CheckpointManager(tmp_path, every_steps=10, keep_last=3) as manager:
        app = state()
        with pytest.warns(zipsave.ZipsaveWarning) as caught:
            checkpoint = manager.restore_latest(app)
        assert checkpoint.step == 20 and app["step"] == 20
        assert torch.equal(app["model"].weight, torch.full((2, 3), 20.0))  # wholly step 20's
        assert torch.equal(app["model"].bias, torch.full((2,), 20.0))
        messages = [str(w.message) for w in caught]
        assert len(messages) == 2
        assert messages[0].startswith(
            f"checkpoint directory `{tmp_path}`: the checkpoint of step 40 cannot be resumed from (ArchiveFormatError: "
            f"archive `{tmp_path / name(40)}`: not a zip archive, or truncated"
        )
        assert messages[0].endswith(f"Resumed from step 20 instead; it was moved to `{name(40)}.broken`.")
        assert "the checkpoint of step 30 cannot be resumed from (IntegrityError: " in messages[1]
        assert "member `model.pth`" in messages[1] and f"`{name(30)}.broken`" in messages[1]
        assert [c.step for c in manager.list()] == [20]
        for step in range(21, 41):  # steps 30 and 40 are saved again, not refused as "already held"
            manager.save(step, state(float(step), step))
    assert files(tmp_path) == [name(20), name(30), name(30) + ".broken", name(40), name(40) + ".broken", INDEX]
    with zipsave.CheckpointManager(tmp_path, every_steps=10, keep_last=3) as manager:
        assert manager.load_latest()["step"] == 40  # the .broken files are left alone
    assert main(["list", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        f"  set aside as damaged by a resume: {name(30)}.broken",
        f"  set aside as damaged by a resume: {name(40)}.broken",
    ]


def test_load_latest_falls_back_too(tmp_path):
    run_to(tmp_path, 20)
    (tmp_path / name(20)).write_bytes(b"")
    with zipsave.CheckpointManager(tmp_path, every_steps=10) as manager:
        with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("the checkpoint of step 20 cannot be resumed from")):
            loaded = manager.load_latest()
        assert loaded["step"] == 10 and torch.equal(loaded["model"]["weight"], torch.full((2, 3), 10.0))
        assert manager.latest().step == 10


def test_when_no_checkpoint_is_intact_the_newest_error_is_raised_and_nothing_moves(tmp_path):
    run_to(tmp_path, 20)
    truncate(tmp_path / name(20))
    bit_rot(tmp_path / name(10), 10.0)
    before = files(tmp_path)
    with zipsave.CheckpointManager(tmp_path, every_steps=10) as manager:
        with pytest.raises(
            zipsave.ArchiveFormatError, match=re.escape(f"archive `{tmp_path / name(20)}`: not a zip")
        ) as raised:
            manager.restore_latest(state())
        assert raised.value.__notes__ == ["No older checkpoint could be resumed from either: step 10 (IntegrityError)."]
        assert [c.step for c in manager.list()] == [10, 20]
    assert files(tmp_path) == before


def test_a_mismatch_with_the_object_is_raised_not_skipped(tmp_path):
    """Only a damaged archive is skipped: an object that does not fit would not fit an older one."""
    run_to(tmp_path, 20)
    with zipsave.CheckpointManager(tmp_path, every_steps=10) as manager:
        wrong = {"model": torch.nn.Linear(5, 5), "step": 0}
        with pytest.raises(zipsave.ZipsaveError, match="model"):
            manager.restore_latest(wrong)
        assert [c.step for c in manager.list()] == [10, 20]
    assert files(tmp_path) == [name(10), name(20), INDEX]


def test_a_closed_manager_falls_back_but_changes_nothing(tmp_path):
    run_to(tmp_path, 20)
    truncate(tmp_path / name(20))
    manager = zipsave.CheckpointManager(tmp_path, every_steps=10)
    manager.close()
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("Resumed from step 10 instead.")):
        assert manager.load_latest()["step"] == 10
    assert files(tmp_path) == [name(10), name(20), INDEX]


def test_a_damaged_newest_checkpoint_on_a_memory_url(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    url = "memory://zipsave-manager-wide/run a"
    try:
        run_to(url, 20)
        fs.pipe_file("/zipsave-manager-wide/run a/" + name(20), b"PK\x03\x04 not a whole archive")
        with zipsave.CheckpointManager(url, every_steps=10) as manager:
            app = state()
            with pytest.warns(zipsave.ZipsaveWarning, match=re.escape(f"it was moved to `{name(20)}.broken`")):
                assert manager.restore_latest(app).step == 10
            assert app["step"] == 10
            manager.save(20, state(20.0, 20))
        listed = sorted(p.rsplit("/", 1)[1] for p in fs.ls("/zipsave-manager-wide/run a", detail=False))
        assert listed == [name(10), name(20), name(20) + ".broken", INDEX]
    finally:
        if fs.exists("/zipsave-manager-wide"):
            fs.rm("/zipsave-manager-wide", recursive=True)


# -- keep_best -----------------------------------------------------------------------------------
def test_a_misspelt_keep_best_metric_is_named_once(tmp_path):
    with zipsave.CheckpointManager(tmp_path, keep_last=1, keep_best=("reward", "max"), background=False) as manager:
        expected = (
            f"CheckpointManager of `{tmp_path}`: keep_best ranks checkpoints by `reward`, but the checkpoint of "
            "step 1 has no metric `reward` (it has `loss`, `rew`); a checkpoint without a number there is never "
            "kept as best, and keep_last alone decides what is deleted."
        )
        with pytest.warns(zipsave.ZipsaveWarning, match=re.escape(expected)):
            manager.save(1, state(), metrics={"rew": 9.0, "loss": 1.0})
        manager.save(2, state(), metrics={"rew": 1.0, "loss": 1.0})  # once is enough (warnings are errors here)
        assert [c.step for c in manager.list()] == [2] and manager.best() is None


def test_a_number_passed_as_a_string_is_named(tmp_path):
    with zipsave.CheckpointManager(tmp_path, keep_last=1, keep_best=("loss", "min"), background=False) as manager:
        with pytest.warns(
            zipsave.ZipsaveWarning, match=re.escape("has `loss` = '0.125', a str, where a number is needed")
        ):
            manager.save(1, state(), metrics={"loss": f"{0.125:.3f}"})


@pytest.mark.parametrize(
    "first", [{}, {"reward": None}, {"reward": float("nan")}, {"reward": np.float32(1.5)}, {"reward": -float("inf")}]
)
def test_no_warning_before_anything_is_measured_or_for_nan(tmp_path, first):
    """An SB3 run has no episode mean before the first episode ends; NaN is a value (a diverged loss)."""
    with zipsave.CheckpointManager(tmp_path, keep_last=1, keep_best=("reward", "max"), background=False) as manager:
        manager.save(1, state(), metrics=first)
        manager.save(2, state(), metrics={"reward": 2.0})
        manager.save(3, state(), metrics={"reward": 1.0})
        assert [c.step for c in manager.list()] == [2, 3] and manager.best().step == 2


def test_a_metric_measured_only_sometimes_does_not_warn_once_it_was_seen(tmp_path):
    with zipsave.CheckpointManager(tmp_path, keep_last=1, keep_best=("eval", "max"), background=False) as manager:
        manager.save(1, state(), metrics={"eval": 3.0, "loss": 1.0})
        manager.save(2, state(), metrics={"loss": 0.5})
        manager.save(3, state(), metrics={"loss": 0.25})
        assert [c.step for c in manager.list()] == [1, 3]


@pytest.mark.parametrize("mode, best", [("min", 4), ("max", 2)])
def test_keep_best_min_and_max_with_odd_values(tmp_path, mode, best):
    metrics = {1: None, 2: float("inf"), 3: float("nan"), 4: -3, 5: True, 6: 0.5}
    with zipsave.CheckpointManager(tmp_path, keep_last=1, keep_best=("m", mode), background=False) as manager:
        for step, value in metrics.items():
            manager.save(step, state(), metrics={"m": value})
        assert manager.best().step == best
        assert [c.step for c in manager.list()] == sorted({best, 6})
    reopened = zipsave._manager.list_checkpoints(tmp_path)
    assert [c.metrics["m"] for c in reopened] == [metrics[c.step] for c in reopened]


# -- restore_best / load_best -------------------------------------------------------------------
def _run_with_rewards(folder: Path, rewards: dict[int, float]) -> None:
    with zipsave.CheckpointManager(folder, background=False) as manager:  # keeps every checkpoint
        for step, reward in rewards.items():
            manager.save(step, state(float(step), step), metrics={"reward": reward, "loss": -reward})


def test_restore_best_and_load_best_pick_the_best_not_the_newest(tmp_path):
    _run_with_rewards(tmp_path, {1: 0.5, 2: 9.0, 3: 1.0, 4: 2.0})
    with zipsave.CheckpointManager(tmp_path, keep_best=("reward", "max")) as manager:
        live = state(-1.0)
        checkpoint = manager.restore_best(live)
        assert checkpoint.step == 2 and torch.all(live["model"].weight == 2.0) and live["step"] == 2
        loaded = manager.load_best()
        assert loaded["step"] == 2 and torch.all(loaded["model"]["weight"] == 2.0)  # an app state: state dicts
        # Another metric and mode than keep_best's: `loss` = -reward, lowest is step 2 too; highest is step 1.
        assert manager.restore_best(live, "loss", "max").step == 1 and torch.all(live["model"].weight == 1.0)
        assert manager.load_best("loss", "min")["step"] == 2


def test_restore_best_without_keep_best_needs_a_metric(tmp_path):
    _run_with_rewards(tmp_path, {1: 0.5, 2: 9.0})
    with zipsave.CheckpointManager(tmp_path) as manager:
        with pytest.raises(ValueError, match="name a metric"):
            manager.restore_best(state())
        assert manager.load_best("reward")["step"] == 2  # mode defaults to max


def test_restore_best_with_a_misspelt_metric_is_an_error_not_a_fresh_start(tmp_path):
    _run_with_rewards(tmp_path, {1: 0.5, 2: 9.0})
    with zipsave.CheckpointManager(tmp_path) as manager:
        live = state(-1.0)
        with pytest.raises(ValueError, match=re.escape("has the metric 'rewrd'; they have ['loss', 'reward']")):
            manager.restore_best(live, "rewrd")
        assert torch.all(live["model"].weight == -1.0)
    with zipsave.CheckpointManager(tmp_path / "empty") as manager:  # no checkpoint yet: start fresh
        assert manager.restore_best(state(), "reward") is None and manager.load_best("reward") is None


def test_a_damaged_best_checkpoint_is_an_error_never_the_next_best(tmp_path):
    _run_with_rewards(tmp_path, {1: 0.5, 2: 9.0, 3: 1.0})
    best = tmp_path / name(2)
    best.write_bytes(best.read_bytes()[: best.stat().st_size // 2])
    with zipsave.CheckpointManager(tmp_path, keep_best=("reward", "max")) as manager:
        live = state(-1.0)
        with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(name(2))):
            manager.restore_best(live)
        with pytest.raises(zipsave.ArchiveFormatError):
            manager.load_best()
        assert torch.all(live["model"].weight == -1.0)
        assert [c.step for c in manager.list()] == [1, 2, 3] and best.exists()  # nothing moved aside


# -- the command on files that are not archives --------------------------------------------------
PICKLE_ERROR = "is a pickle file, not a zip archive. zipsave reads zip archives and never unpickles."


def test_cli_names_a_pickle_file_sb3_replay_buffer(tmp_path, capsys):
    stable_baselines3 = pytest.importorskip("stable_baselines3")
    model = stable_baselines3.DQN("MlpPolicy", "CartPole-v1", buffer_size=100, learning_starts=10, seed=0)
    model.save(tmp_path / "dqn")
    model.save_replay_buffer(tmp_path / "buffer")
    buffer = tmp_path / "buffer.pkl"
    for args, status in [
        (["inspect", buffer], 2),
        (["diff", tmp_path / "dqn.zip", buffer], 2),
        (["extract", buffer, tmp_path / "out"], 2),
    ]:
        assert main([str(a) for a in args]) == status
        err = capsys.readouterr().err
        assert (
            err.startswith(f"zipsave: error: archive `{buffer}`: {PICKLE_ERROR}")
            and "`model.load_replay_buffer(path)`" in err
        )
    assert main(["verify", str(buffer)]) == 1
    assert PICKLE_ERROR in capsys.readouterr().out
    assert not (tmp_path / "out").exists()
    assert main(["verify", str(tmp_path / "dqn.zip")]) == 0  # SB3's own archive: no manifest, a note
    assert "note: archive has no manifest.json" in capsys.readouterr().out
    assert main(["list", str(tmp_path)]) == 2
    assert f"`{tmp_path}` has no `zipsave-checkpoints.json`" in capsys.readouterr().err


class _RemoteLike(io.BytesIO):
    """A file object that refuses to seek before the start with ValueError, as s3fs's does."""

    def seek(self, offset, whence=0):
        if whence == 2 and offset + len(self.getbuffer()) < 0:
            raise ValueError("Seek before start of file")
        return super().seek(offset, whence)


@pytest.mark.parametrize("body", [b"", b"junk", b"PK\x05\x06"])
def test_a_file_shorter_than_any_zip_reads_the_same_from_a_remote_file_object(body):
    with pytest.raises(
        zipsave.ArchiveFormatError, match=re.escape("not a zip archive, or truncated (File is not a zip file).")
    ):
        zipsave.inspect(_RemoteLike(body))


# -- background or not, per save -----------------------------------------------------------------
def test_one_save_can_block_in_a_background_manager_and_the_other_way_round(tmp_path):
    with zipsave.CheckpointManager(tmp_path / "bg", every_steps=10) as manager:
        assert isinstance(manager.save(10, state(1.0, 10)), zipsave.SaveHandle)
        last = manager.save(15, state(2.0, 15), force=True, background=False)  # the end of training
        assert isinstance(last, zipsave.Checkpoint) and last.step == 15
        assert [c.step for c in manager.list()] == [10, 15]  # the earlier background save is listed too
    with zipsave.CheckpointManager(tmp_path / "fg", every_steps=10, background=False) as manager:
        handle = manager.save(10, state(1.0, 10), background=True)
        assert isinstance(handle, zipsave.SaveHandle)
        manager.wait()
        assert handle.done() and [c.step for c in manager.list()] == [10]


# -- the command on a manager's directory --------------------------------------------------------
def test_cli_verify_checks_every_checkpoint_of_a_manager_directory(tmp_path, capsys):
    run_to(tmp_path, 30)
    assert main(["verify", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path}: OK\n"
    (tmp_path / name(10)).unlink()
    bit_rot(tmp_path / name(20), 20.0)
    assert main(["verify", str(tmp_path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["problems"][0] == f"`{name(10)}` (step 10): the index lists it, but the archive is gone."
    assert report["problems"][1].startswith(f"`{name(20)}` (step 20): member `model.pth`: ")
    assert not any(name(30) in problem for problem in report["problems"])


@pytest.mark.parametrize("command", [["inspect", "{d}"], ["diff", "{d}", "{d}"], ["extract", "{d}", "{d}/out"]])
def test_cli_names_a_manager_directory_where_an_archive_is_expected(tmp_path, capsys, command):
    run_to(tmp_path, 20)
    assert main([part.format(d=tmp_path) for part in command]) == 2
    assert capsys.readouterr().err == (
        f"zipsave: error: `{tmp_path}` is a checkpoint directory of a CheckpointManager, not an archive. "
        f"`zipsave list {tmp_path}` lists its checkpoints; `zipsave inspect {tmp_path / name(20)}` looks inside the newest.\n"
    )
    assert not (tmp_path / "out").exists()


def test_cli_diff_shows_a_tagged_value_that_changed_by_its_value(tmp_path, capsys):
    """NaN, infinities and tuples are stored tagged; their type alone (`<float>`) hid the change."""
    zipsave.save({"lr": float("nan"), "net_arch": (64, 64), "clip": float("inf"), "gamma": 0.99}, tmp_path / "a.zip")
    zipsave.save({"lr": 3e-4, "net_arch": [64, 64], "clip": 0.2, "gamma": float("-inf")}, tmp_path / "b.zip")
    assert main(["diff", str(tmp_path / "a.zip"), str(tmp_path / "b.zip")]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[2:6] == [
        "~ data    lr: nan -> 0.0003",
        "~ data    net_arch: (64, 64) -> [64,64]",
        "~ data    clip: inf -> 0.2",
        "~ data    gamma: 0.99 -> -inf",
    ]


def test_a_damaged_index_says_how_to_go_on(tmp_path):
    run_to(tmp_path, 20)
    index = tmp_path / INDEX
    index.write_bytes(index.read_bytes()[:40])
    with pytest.raises(zipsave.CheckpointDirectoryError, match=re.escape(f"index `{INDEX}` is not JSON")) as raised:
        zipsave.CheckpointManager(tmp_path)
    assert raised.value.hint.endswith("to go on in this directory, move them aside and remove the index.")
    assert zipsave.load(tmp_path / name(20))["step"] == 20  # the archives themselves are whole


def test_removing_an_unlisted_archive_is_logged_as_a_warning(tmp_path, caplog):
    """An archive copied in by hand looks like an interrupted save's: its removal must show."""
    run_to(tmp_path, 10)
    (tmp_path / name(99)).write_bytes((tmp_path / name(10)).read_bytes())
    (tmp_path / ".step-0000000011.zip.x.zipsave-tmp").write_bytes(b"half")
    with caplog.at_level(logging.INFO, logger="zipsave"):
        zipsave.CheckpointManager(tmp_path).close()
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        f"zipsave: removed 2 leftover file(s) of an interrupted run from `{tmp_path}`: "
        f".step-0000000011.zip.x.zipsave-tmp, {name(99)} (archives the index does not list are never resumed from"
    )
    caplog.clear()
    (tmp_path / ".step-0000000011.zip.y.zipsave-tmp").write_bytes(b"half")
    with caplog.at_level(logging.INFO, logger="zipsave"):
        zipsave.CheckpointManager(tmp_path).close()
    assert [r.levelno for r in caplog.records] == [logging.INFO]  # our own temporary file only
    assert files(tmp_path) == [name(10), INDEX]


def test_an_archive_deleted_while_the_manager_is_open_is_skipped_on_resume(tmp_path):
    with zipsave.CheckpointManager(tmp_path, every_steps=10, background=False) as manager:
        for step in range(1, 21):
            manager.save(step, state(float(step), step))
        (tmp_path / name(20)).unlink()
        app = state()
        with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("(ArchiveNotFoundError: archive")) as caught:
            assert manager.restore_latest(app).step == 10
        assert str(caught[0].message).endswith("Resumed from step 10 instead.")  # nothing to move aside
        assert app["step"] == 10 and [c.step for c in manager.list()] == [10]
        manager.save(20, state(20.0, 20))
    assert files(tmp_path) == [name(10), name(20), INDEX]


def test_sb3_callback_names_reset_num_timesteps_when_steps_go_back(tmp_path):
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    import zipsave.sb3

    def make():
        return PPO(
            "MlpPolicy", make_vec_env("CartPole-v1", n_envs=1, seed=0), n_steps=64, batch_size=64, n_epochs=1, seed=0
        )

    callback = zipsave.sb3.CheckpointCallback(tmp_path, every_steps=64)
    make().learn(64, callback=callback)
    callback.close()
    model = make()
    callback = zipsave.sb3.CheckpointCallback(tmp_path, every_steps=64)
    assert callback.restore_latest(model).step == 64
    with pytest.raises(
        zipsave.CheckpointDirectoryError, match=re.escape("already holds step 64, later than step 0.")
    ) as raised:
        model.learn(64, callback=callback)  # without reset_num_timesteps=False
    assert "(without `reset_num_timesteps=False`, learn counts from 0 again)" in raised.value.hint
    callback.close()


# -- one manager per directory -------------------------------------------------------------------
def test_a_second_manager_in_the_same_process_takes_over(tmp_path):
    """A notebook cell run again opens a manager while the one it made before is still open:
    the newer one takes the directory over; the older one finishes its saves and saves no more."""
    first = zipsave.CheckpointManager(tmp_path, background=True)
    first.save(1, {"w": torch.ones(2)})
    second = zipsave.CheckpointManager(tmp_path)
    assert [c.step for c in second.list()] == [1]  # the older one's pending save was finished first
    with pytest.raises(
        zipsave.ZipsaveError,
        match=re.escape("was replaced by a newer CheckpointManager of the same directory in this process"),
    ) as raised:
        first.save(2, {"w": torch.ones(2)})
    assert raised.value.hint == "Save through the newer manager."
    second.save(2, {"w": torch.ones(2)})
    second.close()
    first.close()  # harmless
    assert [c.step for c in zipsave.CheckpointManager(tmp_path, read_only=True).list()] == [1, 2]


def test_a_second_manager_in_the_same_process_on_a_memory_url(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    url = f"memory://zipsave-manager-wide-lock/{tmp_path.name}"
    first = zipsave.CheckpointManager(url)
    try:
        second = zipsave.CheckpointManager(url)
        with pytest.raises(zipsave.ZipsaveError, match=re.escape("was replaced by a newer CheckpointManager")):
            first.save(1, {"w": torch.ones(2)})
        second.close()
    finally:
        first.close()
        fsspec.filesystem("memory").rm("/zipsave-manager-wide-lock", recursive=True)


def test_a_checkpoint_over_a_safety_limit_is_raised_not_skipped(tmp_path):
    """A limit is not damage: the newest checkpoint may just have grown (a replay buffer)."""
    with zipsave.CheckpointManager(tmp_path, background=False) as manager:
        manager.save(1, {"buffer": torch.zeros(10)})
        manager.save(2, {"buffer": torch.zeros(100_000)})
        with pytest.raises(zipsave.ArchiveLimitError, match="limit"):
            manager.restore_latest({"buffer": torch.zeros(100_000)}, limits=zipsave.Limits(max_member_bytes=100_000))
        assert [c.step for c in manager.list()] == [1, 2]
    assert files(tmp_path) == [name(1), name(2), INDEX]


def test_an_archive_of_another_kind_is_raised_not_skipped(tmp_path):
    """ArchiveFormatError also says "pass `cls=`": only an archive that verify finds broken is skipped."""
    stable_baselines3 = pytest.importorskip("stable_baselines3")
    model = stable_baselines3.PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, seed=0)
    with zipsave.CheckpointManager(tmp_path, background=False) as manager:
        manager.save(1, state(1.0, 1))  # an older checkpoint that would load without `cls=`
        manager.save(2, model)
        with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("`zipsave.load(path, cls=PPO, env=env)`")):
            manager.load_latest()  # never "resumed from step 1 instead" (warnings are errors here)
        assert manager.load_latest(cls=stable_baselines3.PPO).num_timesteps == 0
        assert [c.step for c in manager.list()] == [1, 2]
    assert files(tmp_path) == [name(1), name(2), INDEX]


def test_a_hand_edited_data_member_is_raised_not_set_aside(tmp_path):
    """Editing `data` in a zip tool is allowed: the person who did it decides (strict=False)."""
    with zipsave.CheckpointManager(tmp_path, background=False) as manager:
        manager.save(1, {**state(1.0, 1), "lr": 0.125})
        manager.save(2, {**state(2.0, 2), "lr": 0.125})
    path = tmp_path / name(2)
    with zipfile.ZipFile(path) as zf:
        members = [(info, zf.read(info.filename)) for info in zf.infolist()]
    with zipfile.ZipFile(path, "w") as zf:
        for info, payload in members:
            zf.writestr(info, payload.replace(b"0.125", b"0.375") if info.filename == "data" else payload)
    with zipsave.CheckpointManager(tmp_path, background=False) as manager:
        app = {**state(), "lr": 0.0}
        with pytest.raises(zipsave.IntegrityError, match=re.escape("member `data`: differs from manifest.json")):
            manager.restore_latest(app)
        with pytest.warns(zipsave.ZipsaveWarning, match="edited after saving"):
            assert manager.restore_latest(app, strict=False).step == 2
        assert app["lr"] == 0.375 and app["step"] == 2
    assert files(tmp_path) == [name(1), name(2), INDEX]
