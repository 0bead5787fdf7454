"""Background saves: the archive shows the state at the call, whatever training does next."""

from __future__ import annotations

import gc
import io
import logging
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import zipsave
from zipsave._api import _background


def make(width=64, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh(), torch.nn.Linear(width, 4))
    model.optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model


def train(model, steps=1):
    width = model[0].in_features
    for _ in range(steps):
        loss = model(torch.randn(8, width)).pow(2).mean()
        model.optimizer.zero_grad()
        loss.backward()
        model.optimizer.step()


class Holder(zipsave.Saveable):
    def __init__(self, width=64):
        self.policy = make(width)
        self.log_ent_coef = torch.zeros(1, requires_grad=True)
        self.steps = 0


class GatedFile(io.BytesIO):
    """A destination whose writes wait until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.name = "gated.zip"

    def write(self, b) -> int:
        assert self.gate.wait(30), "the test never opened the gate"
        return super().write(b)


def state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_archive_reflects_the_moment_of_the_call(tmp_path):
    algo = Holder(width=512)  # ~1 MB of parameters plus Adam moments
    train(algo.policy, 2)
    zipsave.save(algo, tmp_path / "plain.zip")  # the reference: a plain save of the same state
    saved = state(algo.policy)

    handle = zipsave.save(algo, tmp_path / "bg.zip", background=True)
    # training goes on at once, in place
    train(algo.policy, 3)
    with torch.no_grad():
        for p in algo.policy.parameters():
            p.add_(1.0)
        algo.log_ent_coef.add_(5.0)
    algo.steps = 99
    handle.wait()

    assert handle.done() and handle.exception() is None
    loaded = zipsave.load(tmp_path / "bg.zip")
    assert all(torch.equal(v, saved[k]) for k, v in loaded.policy.state_dict().items())
    assert loaded.steps == 0 and float(loaded.log_ent_coef.detach()) == 0.0
    # the snapshot keeps every tensor's storage, dtype and grad flag: same bytes as a plain save
    assert (tmp_path / "bg.zip").read_bytes() == (tmp_path / "plain.zip").read_bytes()


def test_shared_storages_stay_shared(tmp_path):
    base = torch.arange(12.0)
    app = {"tensors": {"a": base[:6], "b": base[6:], "again": base}, "step": 1}

    class Box:
        def state_dict(self):
            return app["tensors"]

        def load_state_dict(self, sd):
            app["loaded"] = sd

    zipsave.save({"box": Box()}, tmp_path / "plain.zip")
    zipsave.save({"box": Box()}, tmp_path / "bg.zip", background=True).wait()
    assert (tmp_path / "bg.zip").read_bytes() == (tmp_path / "plain.zip").read_bytes()


def test_handle_done_wait_timeout_and_repr():
    model = make()
    target = GatedFile()
    handle = zipsave.save({"model": model}, target, background=True)
    assert not handle.done()
    assert repr(handle) == "<SaveHandle 'gated.zip' running>"
    with pytest.raises(
        TimeoutError, match=re.escape("the background save to `gated.zip` is still running after 0.05 s")
    ):
        handle.wait(timeout=0.05)
    target.gate.set()
    handle.wait(timeout=30)
    assert handle.done() and repr(handle) == "<SaveHandle 'gated.zip' done>"
    target.seek(0)
    loaded = zipsave.load(target)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded["model"].items())


def test_errors_surface_on_wait(tmp_path):
    (tmp_path / "a_file").write_text("not a folder")
    handle = zipsave.save({"model": make()}, tmp_path / "a_file" / "x.zip", background=True)
    with pytest.raises(OSError):
        handle.wait()
    assert isinstance(handle.exception(), OSError)
    assert repr(handle).endswith("failed: FileExistsError>") or "failed:" in repr(handle)


class Unpicklable:
    def state_dict(self):
        return {"f": lambda: 0}

    def load_state_dict(self, sd):
        pass


def test_failed_background_save_keeps_the_previous_archive(tmp_path):
    path = tmp_path / "ckpt.zip"
    zipsave.save({"model": make(), "step": 1}, path)
    before = path.read_bytes()
    handle = zipsave.save({"model": make(seed=1), "bad": Unpicklable(), "step": 2}, path, background=True)
    assert handle.exception() is not None
    with pytest.raises(Exception, match="lambda"):
        handle.wait()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.zip"]  # no temporary left behind


def test_saves_to_the_same_path_land_in_call_order(tmp_path):
    path = tmp_path / "ckpt.zip"
    big = {"model": make(width=2048), "step": 1}  # ~50 MB with Adam: slow to write
    train(big["model"])
    first = zipsave.save(big, path, background=True)
    second = zipsave.save({"step": 2}, str(path)[: -len(".zip")], background=True)  # same place, no suffix
    second.wait()
    assert first.done()  # the second waited for the first
    assert zipsave.load(path) == {"step": 2}

    # a plain save after a background one waits too
    zipsave.save(big, path, background=True)
    zipsave.save({"step": 3}, path)
    assert zipsave.load(path) == {"step": 3}


def test_saves_to_different_paths_run_side_by_side(tmp_path):
    gated = GatedFile()
    slow = zipsave.save({"model": make()}, gated, background=True)
    fast = zipsave.save({"model": make()}, tmp_path / "other.zip", background=True)
    fast.wait(timeout=30)
    assert not slow.done()
    gated.gate.set()
    slow.wait(timeout=30)


def test_in_flight_snapshots_are_bounded():
    gates = [GatedFile() for _ in range(_background.MAX_IN_FLIGHT)]
    handles = [zipsave.save({"model": make()}, g, background=True) for g in gates]
    returned = threading.Event()

    def one_more():
        handles.append(zipsave.save({"model": make()}, io.BytesIO(), background=True))
        returned.set()

    caller = threading.Thread(target=one_more)
    caller.start()
    assert not returned.wait(0.3)  # every slot holds a snapshot: the call waits
    gates[0].gate.set()
    assert returned.wait(30)
    for g in gates:
        g.gate.set()
    caller.join()
    for h in handles:
        h.wait(timeout=30)


def test_a_save_is_handed_to_a_writer_thread_started_before(tmp_path, monkeypatch):
    gates = [GatedFile() for _ in range(_background.MAX_IN_FLIGHT)]
    handles = [zipsave.save({"model": make()}, g, background=True) for g in gates]  # every writer busy
    for g in gates:
        g.gate.set()
    for h in handles:
        h.wait(timeout=30)

    caller, start = threading.current_thread(), threading.Thread.start

    def refuse(self):  # in the caller; the writer may start its own (closing a replaced file)
        if threading.current_thread() is caller:
            raise AssertionError("a background save started a thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", refuse)
    for step in range(2 * _background.MAX_IN_FLIGHT):
        zipsave.save({"model": make(), "step": step}, tmp_path / "x.zip", background=True).wait(timeout=30)
    assert zipsave.load(tmp_path / "x.zip")["step"] == 2 * _background.MAX_IN_FLIGHT - 1


def test_saveable_save_in_background(tmp_path):
    algo = Holder()
    handle = algo.save(tmp_path / "algo.zip", background=True)
    assert isinstance(handle, zipsave.SaveHandle)
    handle.wait()
    assert isinstance(Holder.load(tmp_path / "algo.zip"), Holder)


def test_unretrieved_failure_is_logged(tmp_path, caplog):
    (tmp_path / "a_file").write_text("")
    handle = zipsave.save({"x": 1}, tmp_path / "a_file" / "x.zip", background=True)
    with caplog.at_level(logging.ERROR, logger="zipsave"):
        while not handle.done():
            time.sleep(0.01)
        assert "failed and nobody called wait()" not in caplog.text
        del handle
        # The writer thread holds the handle (its work item) a moment after it is done: the
        # last reference, on a loaded machine, so the log may come from that thread a little later
        for _ in range(3000):
            gc.collect()
            if "failed and nobody called wait()" in caplog.text:
                break
            time.sleep(0.01)
    assert "failed and nobody called wait()" in caplog.text


def test_pending_saves_finish_before_the_interpreter_exits(tmp_path):
    path = tmp_path / "exit.zip"
    script = textwrap.dedent(
        f"""
        import torch, zipsave
        model = torch.nn.Linear(1024, 1024)
        zipsave.save({{"model": model, "step": 7}}, {str(path)!r}, background=True)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert zipsave.load(path)["step"] == 7
