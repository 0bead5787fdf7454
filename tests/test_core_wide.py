"""Round trips of model shapes met in the wild: containers of every kind, generators held
elsewhere, live handles, frozen dataclasses, torch's hooks and wrappers, training after a load."""

from __future__ import annotations

import collections
import concurrent.futures
import queue
import threading
import zipfile

import torch
import torch.nn.utils.prune  # noqa: F401 - torch.nn.utils.prune is not imported by torch.nn
from models import same_state

import zipsave

Heads = collections.namedtuple("Heads", "pi vf")


def _bump(module: torch.nn.Module, by: float = 1.0) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(by)


def _pth_members(path) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        return sorted(n for n in zf.namelist() if n.endswith(".pth") and n != "pytorch_variables.pth")


# -- live handles --------------------------------------------------------------------------
class Busy(zipsave.Saveable):
    def __init__(self, width=2):
        self.net = torch.nn.Linear(width, width)
        self.semaphore = threading.Semaphore(2)
        self.bounded = threading.BoundedSemaphore(1)
        self.barrier = threading.Barrier(1)
        self.jobs = queue.Queue()
        self.results = queue.SimpleQueue()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.steps = 0


def test_semaphores_queues_and_pools_are_left_out_like_locks(tmp_path):
    # A semaphore, barrier, queue or thread pool failed the save ("does not pickle").
    model = Busy()
    model.steps = 5
    _bump(model.net)
    model.save(tmp_path / "m.zip")
    keys = {entry.key for entry in zipsave.inspect(tmp_path / "m.zip").data}
    assert keys == {"steps"}
    loaded = Busy.load(tmp_path / "m.zip")
    assert loaded.steps == 5 and same_state(model.net, loaded.net)
    assert isinstance(loaded.jobs, queue.Queue) and loaded.pool is not model.pool
    model.pool.shutdown()
    loaded.pool.shutdown()
