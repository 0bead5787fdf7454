"""CheckpointManager: due logic, retention, background saves, resume, locking, refusing
foreign directories, remote directories, and crash safety under SIGKILL."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import signal
import socket
import sys
import time
import types
from pathlib import Path

import pytest
import torch

import zipsave
from zipsave._manager import _store, list_checkpoints
from zipsave._manager._lock import LOCK_NAME
from zipsave._tools import verify

INDEX = "zipsave-checkpoints.json"


def state(value: float = 0.0, step: int = 0) -> dict:
    model = torch.nn.Linear(4, 4)
    with torch.no_grad():
        model.weight.fill_(value)
    return {"model": model, "step": step}


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != LOCK_NAME)


def names(steps) -> list[str]:
    return [f"step-{s:010d}.zip" for s in steps] + [INDEX]


# -- saving and the policy -----------------------------------------------------------------------
def test_save_is_a_no_op_until_due(tmp_path):
    with zipsave.CheckpointManager(tmp_path / "run", every_steps=10, background=False) as manager:
        results = {step: manager.save(step, state(step=step), metrics={"loss": 1.0 / step}) for step in range(1, 26)}
        assert [s for s, r in results.items() if r is not None] == [10, 20]
        assert [c.step for c in manager.list()] == [10, 20]
        latest = manager.latest()
        assert isinstance(latest, zipsave.Checkpoint) and latest == results[20]
        assert latest.metrics == {"loss": 0.05} and latest.size == os.path.getsize(latest.path) > 0
        assert abs(latest.time - time.time()) < 60
        assert manager.save(25, state(step=25), force=True).step == 25  # e.g. at the end of training
        assert manager.save(25, state(step=25), force=True) is None  # already saved
    assert files(tmp_path / "run") == names([10, 20, 25])
    assert [c.step for c in list_checkpoints(tmp_path / "run")] == [10, 20, 25]


def test_steps_that_jump_over_a_multiple_still_save(tmp_path):
    """SB3 counts timesteps in strides of n_envs: crossing a multiple is enough."""
    with zipsave.CheckpointManager(tmp_path, every_steps=100, background=False) as manager:
        saved = [step for step in range(0, 1000, 48) if manager.save(step, state(step=step)) is not None]
    assert saved == [144, 240, 336, 432, 528, 624, 720, 816, 912]


def test_every_seconds(tmp_path, monkeypatch):
    from zipsave._manager import _checkpoints

    now = [1000.0]  # a clock of the test's own: a slow fsync on a busy machine moves no deadline
    monkeypatch.setattr(_checkpoints, "time", types.SimpleNamespace(monotonic=lambda: now[0], time=time.time))
    with zipsave.CheckpointManager(tmp_path, every_seconds=0.3, background=False) as manager:
        assert manager.save(1, state()) is None  # the clock starts when the manager opens
        now[0] += 0.35
        assert manager.save(2, state()) is not None
        now[0] += 0.29
        assert manager.save(3, state()) is None
        now[0] += 0.02
        assert manager.save(4, state()) is not None


def test_without_a_schedule_every_call_saves(tmp_path):
    with zipsave.CheckpointManager(tmp_path, background=False) as manager:
        for step in range(3):
            manager.save(step, state(step=step))
        assert [c.step for c in manager.list()] == [0, 1, 2]


def test_keep_last_and_keep_best(tmp_path):
    rewards = {1: 5.0, 2: 9.0, 3: 1.0, 4: 2.0, 5: 3.0, 6: float("nan")}
    with zipsave.CheckpointManager(tmp_path, keep_last=2, keep_best=("reward", "max"), background=False) as manager:
        for step, reward in rewards.items():
            manager.save(step, state(step=step), metrics={"reward": reward})
            assert files(tmp_path) == names(c.step for c in manager.list())  # nothing unlisted lingers
        assert [c.step for c in manager.list()] == [2, 5, 6]
        assert manager.best().step == 2
        assert manager.best("reward", "min").step == 5  # among the kept ones
    with zipsave.CheckpointManager(
        tmp_path / "b", keep_last=1, keep_best=("loss", "min", 2), background=False
    ) as manager:
        for step, loss in enumerate([3, 1, 2, 5, 4], start=1):
            manager.save(step, state(), metrics={"loss": loss})
        assert [c.step for c in manager.list()] == [2, 3, 5]


def test_metrics_accept_numpy_and_tensor_scalars(tmp_path):
    import numpy as np

    with zipsave.CheckpointManager(tmp_path, background=False) as manager:
        manager.save(1, state(), metrics={"a": np.float32(0.5), "b": torch.tensor(3), "c": "x", "d": True})
        assert manager.latest().metrics == {"a": 0.5, "b": 3, "c": "x", "d": True}
        with pytest.raises(TypeError, match=re.escape("metric `bad` is a list; expected a number, string or bool.")):
            manager.save(2, state(), metrics={"bad": [1, 2]})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keep_last": 0}, "`keep_last` must be a positive integer or None, got 0."),
        ({"every_steps": 1.5}, "`every_steps` must be a positive integer or None, got 1.5."),
        ({"every_seconds": -1}, "`every_seconds` must be a positive number or None, got -1."),
        ({"keep_best": ("reward", "up")}, '`keep_best` must be (metric, "max" or "min") or (metric, mode, count)'),
        # a count as for keep_last was a bare "TypeError: 'int' object is not iterable"
        ({"keep_best": 1}, "got 1: it keeps the checkpoints with the best value of a metric"),
        # a metric alone meant ("loss", "max"): retention deleted the checkpoints of the lowest loss
        (
            {"keep_best": "loss"},
            "`keep_best='loss'` does not say which value is best: pass `keep_best=('loss', \"min\")`",
        ),
    ],
)
def test_bad_settings_are_named(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        zipsave.CheckpointManager(tmp_path, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_a_step_before_the_newest_checkpoint_is_refused(tmp_path):
    with zipsave.CheckpointManager(tmp_path, every_steps=10, background=False) as manager:
        manager.save(30, state())
    with zipsave.CheckpointManager(tmp_path, every_steps=10, background=False) as manager:
        with pytest.raises(
            zipsave.CheckpointDirectoryError,
            match=re.escape(f"checkpoint directory `{tmp_path}` already holds step 30, later than step 5."),
        ):
            manager.save(5, state())
        assert manager.save(30, state()) is None  # the step the run resumed from
        assert manager.save(40, state()) is not None


# -- background saves ----------------------------------------------------------------------------
def test_background_saves_snapshot_at_call_time(tmp_path):
    app = state(1.0)
    with zipsave.CheckpointManager(tmp_path, every_steps=1, keep_last=2) as manager:
        handles = []
        for step in range(1, 5):
            with torch.no_grad():
                app["model"].weight.fill_(float(step))
            app["step"] = step
            handles.append(manager.save(step, app))
            with torch.no_grad():
                app["model"].weight.fill_(-1.0)  # training goes on at once
        assert all(isinstance(h, zipsave.SaveHandle) for h in handles)
        manager.wait()
        assert [c.step for c in manager.list()] == [3, 4]
        for checkpoint in manager.list():
            loaded = zipsave.load(checkpoint.path)
            assert loaded["step"] == checkpoint.step
            assert torch.equal(loaded["model"]["weight"], torch.full((4, 4), float(checkpoint.step)))
    assert files(tmp_path) == names([3, 4])


class _Explodes:
    def __reduce__(self):
        raise RuntimeError("cannot write this")


class _Stateful:
    def __init__(self, state) -> None:
        self.state = state

    def state_dict(self):
        return self.state

    def load_state_dict(self, state) -> None:
        self.state = state


def test_a_failed_background_save_is_raised_once_and_not_listed(tmp_path):
    manager = zipsave.CheckpointManager(tmp_path, every_steps=1)
    manager.save(1, state(1.0))
    manager.save(2, {"thing": _Stateful({"w": torch.zeros(3), "bad": _Explodes()})})
    with pytest.raises(RuntimeError, match="cannot write this"):
        manager.wait()
    manager.wait()  # raised once
    assert [c.step for c in manager.list()] == [1]
    manager.save(3, state(3.0))
    manager.close()
    assert files(tmp_path) == names([1, 3])


# -- resume --------------------------------------------------------------------------------------
def test_restore_and_load_latest(tmp_path):
    with zipsave.CheckpointManager(tmp_path, every_steps=5) as manager:
        assert manager.restore_latest(state()) is None and manager.load_latest() is None
        for step in range(1, 12):
            manager.save(step, state(float(step), step))
    with zipsave.CheckpointManager(tmp_path, every_steps=5) as manager:
        app = state()
        checkpoint = manager.restore_latest(app)
        assert checkpoint.step == 10 and app["step"] == 10
        assert torch.equal(app["model"].weight, torch.full((4, 4), 10.0))
        assert manager.load_latest()["step"] == 10


def test_resume_refuses_a_damaged_checkpoint(tmp_path):
    """A resume from a checkpoint restored only in part would go on silently wrong."""
    with zipsave.CheckpointManager(tmp_path, background=False) as manager:
        manager.save(1, state(7.0, 1))
        path = Path(manager.latest().path)
    raw = path.read_bytes()
    weight = torch.full((4,), 7.0).numpy().tobytes()
    assert raw.count(weight) >= 1
    path.write_bytes(raw.replace(weight, torch.full((4,), 8.0).numpy().tobytes(), 1))  # bit rot
    with zipsave.CheckpointManager(tmp_path) as manager:
        with pytest.raises(zipsave.IntegrityError, match=re.escape("member `model.pth`")):
            manager.restore_latest(state())
        with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("model.pth")):
            manager.restore_latest(state(), strict=False, skip_broken_tensors=True)


def test_repr_and_notebook_table(tmp_path):
    with zipsave.CheckpointManager(
        tmp_path, keep_last=3, keep_best=("reward", "max"), every_steps=1, background=False
    ) as manager:
        assert (
            repr(manager)
            == f"<CheckpointManager '{tmp_path}': 0 checkpoints; keep_last=3, every_steps=1, keep_best=('reward', 'max')>"
        )
        manager.save(1, state(), metrics={"reward": 2.5})
        manager.save(2, state(), metrics={"reward": 1.5})
        assert "2 checkpoints, latest step 2" in repr(manager)
        html = manager._repr_html_()
        assert "<th>step</th><th>time (UTC)</th><th>size</th><th>reward</th>" in html
        assert html.count("<tr>") == 3 and "<td>2.5</td><td>best</td>" in html


def test_cli_list(tmp_path, capsys):
    from zipsave.cli import main

    with zipsave.CheckpointManager(tmp_path, background=False) as manager:
        manager.save(7, state(), metrics={"reward": 1.25})
        manager.save(12, state(), metrics={"reward": 3.5, "loss": 0.5})
        size = manager.latest().size
    assert main(["list", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{tmp_path}: 2 checkpoints"
    assert lines[1].split() == ["step", "time", "(UTC)", "size", "reward", "loss"]
    assert lines[3].split()[0] == "12" and lines[3].split()[-2:] == ["3.5", "0.5"]
    assert main(["list", str(tmp_path), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(c["step"], c["metrics"]) for c in listed] == [(7, {"reward": 1.25}), (12, {"reward": 3.5, "loss": 0.5})]
    assert listed[1]["size"] == size
    assert main(["list", str(tmp_path / "nothing")]) == 2
    assert f"`{tmp_path / 'nothing'}` does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["list", str(tmp_path / "empty")]) == 2
    assert "has no `zipsave-checkpoints.json`" in capsys.readouterr().err


# -- the directory belongs to one manager --------------------------------------------------------
def test_two_managers_on_one_directory(tmp_path):
    first = zipsave.CheckpointManager(tmp_path)
    first.close()
    with zipsave.CheckpointManager(tmp_path, background=False) as second:
        second.save(1, state())
    with pytest.raises(zipsave.ZipsaveError, match=re.escape(f"the CheckpointManager of `{tmp_path}` is closed.")):
        first.save(2, state())


def _hold(folder: str, report) -> None:
    manager = zipsave.CheckpointManager(folder)
    report.send("open")
    time.sleep(60)
    manager.close()


def test_the_lock_of_a_killed_process_is_recovered(tmp_path):
    receive, send = _FORK.Pipe(duplex=False)
    proc = _FORK.Process(target=_hold, args=(str(tmp_path), send))
    proc.start()
    try:
        assert receive.recv() == "open"
        with pytest.raises(zipsave.CheckpointLockedError, match=re.escape(f"is in use by process {proc.pid} on host")):
            zipsave.CheckpointManager(tmp_path)
    finally:
        proc.kill()
        proc.join()
    zipsave.CheckpointManager(tmp_path).close()


def test_holder_file_lock_on_a_remote_directory(memory_dir, caplog):
    """Object stores have no flock: the lock file names its holder."""
    fs, folder, url = memory_dir
    zipsave.CheckpointManager(url).close()  # the directory exists, unlocked
    dead = {"host": socket.gethostname(), "pid": _dead_pid(), "start": None, "since": 0, "token": "x"}
    fs.pipe_file(f"{folder}/{LOCK_NAME}", json.dumps(dead).encode())
    with caplog.at_level(logging.WARNING, logger="zipsave"):
        manager = zipsave.CheckpointManager(url)  # a dead process on this host: taken over
    assert f"taking over the lock of process {dead['pid']}" in caplog.text
    newer = zipsave.CheckpointManager(url)  # this process's older manager lets the directory go
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("was replaced by a newer CheckpointManager")):
        manager.save(1, state())
    newer.close()
    manager.close()
    assert not fs.exists(f"{folder}/{LOCK_NAME}")

    elsewhere = dict(dead, host="another-host", pid=1)
    fs.pipe_file(f"{folder}/{LOCK_NAME}", json.dumps(elsewhere).encode())
    with pytest.raises(
        zipsave.CheckpointLockedError,
        match=re.escape("If you are sure its process is gone, open with `break_lock=True`."),
    ):
        zipsave.CheckpointManager(url)
    zipsave.CheckpointManager(url, break_lock=True).close()


def _dead_pid() -> int:
    proc = _FORK.Process(target=int)
    proc.start()
    proc.join()
    return proc.pid


def test_a_folder_that_is_not_a_managers_is_refused_untouched(tmp_path):
    (tmp_path / "model.zip").write_bytes(b"mine")
    (tmp_path / "step-0000000001.zip").write_bytes(b"also mine")
    expected = f"`{tmp_path}` is not a checkpoint directory of zipsave: it has no `{INDEX}` but holds `model.zip`, `step-0000000001.zip`. Nothing was changed or deleted."
    with pytest.raises(zipsave.CheckpointDirectoryError, match=re.escape(expected)):
        zipsave.CheckpointManager(tmp_path)
    assert files(tmp_path) == ["model.zip", "step-0000000001.zip"] and not (tmp_path / LOCK_NAME).exists()
    with pytest.raises(zipsave.CheckpointDirectoryError, match=re.escape(f"`{tmp_path}` has no `{INDEX}`")):
        list_checkpoints(tmp_path)


def test_an_unreadable_index_is_an_error(tmp_path):
    (tmp_path / INDEX).write_text('{"format": "something else"}')
    with pytest.raises(
        zipsave.CheckpointDirectoryError, match=re.escape(f"index `{INDEX}` is not a zipsave checkpoint index")
    ):
        zipsave.CheckpointManager(tmp_path)


def test_leftovers_are_removed_and_foreign_files_kept(tmp_path):
    with zipsave.CheckpointManager(tmp_path, background=False) as manager:
        manager.save(1, state())
    (tmp_path / "step-0000000002.zip").write_bytes(b"an archive the index never listed")
    (tmp_path / ".step-0000000003.zip.abc.zipsave-tmp").write_bytes(b"half an archive")
    (tmp_path / "notes.txt").write_text("the user's own file")
    with zipsave.CheckpointManager(tmp_path) as manager:
        assert [c.step for c in manager.list()] == [1]
    assert files(tmp_path) == ["notes.txt", "step-0000000001.zip", INDEX]


# -- remote directories --------------------------------------------------------------------------
@pytest.fixture
def memory_dir():
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    folder = f"/zipsave-manager-{os.getpid()}-{time.monotonic_ns()}"
    yield fs, folder, f"memory://{folder}"
    if fs.exists(folder):
        fs.rm(folder, recursive=True)


def _remote_run(url: str, **options) -> None:
    with zipsave.CheckpointManager(url, keep_last=2, every_steps=10, **options) as manager:
        for step in range(1, 31):
            manager.save(step, state(float(step), step), metrics={"step": step})
    with zipsave.CheckpointManager(url, keep_last=2, every_steps=10, **options) as manager:
        assert [c.step for c in manager.list()] == [20, 30]
        app = state()
        assert manager.restore_latest(app).step == 30 and app["step"] == 30
        assert torch.equal(app["model"].weight, torch.full((4, 4), 30.0))
        assert manager.load_latest()["step"] == 30
    assert [c.step for c in list_checkpoints(url, **options)] == [20, 30]


def test_memory_url(memory_dir):
    fs, folder, url = memory_dir
    _remote_run(url)
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(folder, detail=False)) == names([20, 30])


@pytest.mark.slow
# The lowest stack's botocore imports `cgi` (deprecated in Python 3.11); not zipsave's concern.
@pytest.mark.filterwarnings("ignore:'cgi' is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning:botocore.*")
@pytest.mark.filterwarnings("ignore::DeprecationWarning:aiobotocore.*")
def test_s3(s3):
    fs, options, _ = s3
    _remote_run("s3://zipsave-test/manager-run", storage_options=options)
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls("zipsave-test/manager-run", detail=False)) == names([20, 30])


@pytest.fixture(scope="module")
def s3():
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import test_remote
    finally:
        sys.path.pop(0)
    yield from test_remote.s3.__wrapped__()


# -- crash safety --------------------------------------------------------------------------------
# The runs that get killed are forked from the test process (a fresh interpreter takes ~5-10 s
# to import torch on the CI machines); each child opens its own manager, as a new process would.
_FORK = multiprocessing.get_context("fork")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _train(folder: str, background: bool, kill_at: str, report) -> None:
    """A run that saves every step until it is killed (by the test, or by itself at
    ``kill_at``), reporting each finished ``save`` call."""
    calls = {"write": 0, "delete": 0}
    real_write, real_delete = _store.LocalStore.write, _store.LocalStore.delete

    def write(self, name, payload):
        calls["write"] += 1
        if kill_at == "before-index" and calls["write"] == 3:
            _die()  # the archive of step 2 is durable, the index does not list it
        if kill_at == "index-written-halfway" and calls["write"] == 3:
            with open(os.path.join(self.folder, f".{name}.x.zipsave-tmp"), "wb") as f:
                f.write(payload[: len(payload) // 2])
            _die()
        real_write(self, name, payload)

    def delete(self, name):
        calls["delete"] += 1
        if kill_at == "before-delete" and calls["delete"] == 1:
            _die()  # the index dropped step 1, its file is still there
        real_delete(self, name)

    _store.LocalStore.write, _store.LocalStore.delete = write, delete
    manager = zipsave.CheckpointManager(folder, keep_last=2, every_steps=1, background=background)
    latest = manager.latest()
    step = latest.step if latest else 0
    model = _big_model()
    while True:
        step += 1
        with torch.no_grad():
            for p in model.values():
                p.fill_(float(step))
        manager.save(step, {"model": model, "step": step}, metrics={"step": step})
        report.send(step)


def _big_model(value: float = 0.0) -> torch.nn.Module:
    """~40 MB of parameters, so a save takes long enough to be interrupted."""
    return torch.nn.ParameterDict({f"w{i}": torch.nn.Parameter(torch.full((1 << 20,), value)) for i in range(10)})


def _start(folder: Path, background: bool, kill_at: str):
    receive, send = _FORK.Pipe(duplex=False)
    proc = _FORK.Process(target=_train, args=(str(folder), background, kill_at, send))
    proc.start()
    send.close()
    return proc, receive


def _reports(receive) -> list[int]:
    out = []
    while True:
        try:
            out.append(receive.recv())
        except EOFError:
            return out


def _check_reopened(folder: Path) -> int:
    """Reopen after a kill: only complete checkpoints are listed, nothing else is left, and
    each one loads. Returns the newest step."""
    with zipsave.CheckpointManager(folder, keep_last=2, every_steps=1, background=False) as manager:
        checkpoints = manager.list()
        assert files(folder) == names(c.step for c in checkpoints)
        for checkpoint in checkpoints:
            assert verify(checkpoint.path) == []
            loaded = zipsave.load(checkpoint.path)
            assert loaded["step"] == checkpoint.step == checkpoint.metrics["step"]
            assert torch.equal(loaded["model"]["w9"], torch.full((1 << 20,), float(checkpoint.step)))
        newest = checkpoints[-1].step if checkpoints else 0
        step = newest + 1  # and the run goes on
        manager.save(step, {"model": _big_model(float(step)), "step": step}, metrics={"step": step})
    return newest


@pytest.mark.parametrize(
    ("kill_at", "dies_in", "newest", "left_over"),
    [
        # index writes: 1 creates it, 2 lists step 1, 3 would list step 2
        ("before-index", 2, 1, "step-0000000002.zip"),
        ("index-written-halfway", 2, 1, f".{INDEX}.x.zipsave-tmp"),
        # step 3's index drops step 1 (keep_last=2); then step 1's file is deleted
        ("before-delete", 3, 3, "step-0000000001.zip"),
    ],
)
def test_sigkill_at_each_step_of_a_commit(tmp_path, kill_at, dies_in, newest, left_over):
    proc, receive = _start(tmp_path, False, kill_at)
    reported = _reports(receive)
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    assert reported == list(range(1, dies_in))
    assert left_over in files(tmp_path)
    assert _check_reopened(tmp_path) == newest


@pytest.mark.slow
@pytest.mark.parametrize("background", [False, True], ids=["blocking", "background"])
def test_sigkill_at_random_moments(tmp_path, background):
    for delay in (0.0, 0.1, 0.3, 0.6):
        proc, receive = _start(tmp_path, background, "never")
        first = receive.recv()  # at least one save call per round
        time.sleep(delay)
        proc.kill()
        proc.join(60)
        assert proc.exitcode == -signal.SIGKILL
        assert _check_reopened(tmp_path) >= first - (1 if background else 0)  # a background save may be cut


# -- exact resume --------------------------------------------------------------------------------
def _make_run(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1))
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    return {"model": model, "optim": optim, "step": 0, "rng": zipsave.RNGState()}


def _train_steps(app: dict, manager, stop: int, die_at: int | None = None) -> None:
    import random

    import numpy as np

    while app["step"] < stop:
        app["step"] += 1
        x = torch.from_numpy(np.random.standard_normal((16, 8)).astype(np.float32)) * random.random()
        loss = app["model"](x).pow(2).mean()  # dropout draws from torch's generator
        app["optim"].zero_grad()
        loss.backward()
        app["optim"].step()
        if manager is not None:
            manager.save(app["step"], app, metrics={"loss": loss.item()})
        if app["step"] == die_at:
            manager.wait()
            _die()


def _seed_all(seed: int) -> None:
    import random

    import numpy as np

    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _crashing_run(folder: str) -> None:
    _seed_all(0)
    app = _make_run(0)
    _train_steps(app, zipsave.CheckpointManager(folder, keep_last=2, every_steps=10), stop=60, die_at=27)


def test_a_run_killed_and_resumed_is_bit_identical(tmp_path):
    _seed_all(0)
    uninterrupted = _make_run(0)
    _train_steps(uninterrupted, None, stop=60)

    proc = _FORK.Process(target=_crashing_run, args=(str(tmp_path),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL

    _seed_all(123)  # whatever state this process is in, the checkpoint sets it
    app = _make_run(123)
    with zipsave.CheckpointManager(tmp_path, keep_last=2, every_steps=10) as manager:
        checkpoint = manager.restore_latest(app, strict=True)
        assert checkpoint.step == app["step"] == 20
        _train_steps(app, manager, stop=60)
        manager.wait()
        assert [c.step for c in manager.list()] == [50, 60]
    for key, value in uninterrupted["model"].state_dict().items():
        assert torch.equal(app["model"].state_dict()[key], value), key
    assert str(app["optim"].state_dict()) == str(uninterrupted["optim"].state_dict())
