"""Rank functions for the DCP tests: started by ``torch.multiprocessing`` on 127.0.0.1, each
builds an FSDP2 (``fully_shard``) model on CPU/gloo, saves or loads through zipsave's storage,
and reports what it saw in a small JSON file per rank (the parent asserts on it)."""

from __future__ import annotations

import datetime
import json
import os
import signal
import traceback
import warnings

import torch
import torch.distributed as dist

GLOBAL_BATCH = 8


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 12), torch.nn.Tanh(), torch.nn.Linear(12, 2)
    )


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(GLOBAL_BATCH, 6, generator=g), torch.randn(GLOBAL_BATCH, 2, generator=g)


def train_step(model, optim, step: int, rank: int, world: int) -> float:
    """One Adam step on this rank's rows of a fixed global batch; returns the global loss."""
    x, y = batch(step)
    rows = GLOBAL_BATCH // world
    x, y = x[rank * rows : (rank + 1) * rows], y[rank * rows : (rank + 1) * rows]
    loss = (model(x) - y).pow(2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()
    value = loss.detach().clone()
    if world > 1:
        dist.all_reduce(value)
        value /= world
    return float(value)


def sharded(world: int, seed: int = 0):
    """An FSDP2 model (each Linear and the root fully_shard-ed) and its Adam optimizer."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = make_model(seed)
    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def app_state(model, optim) -> dict:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, optim)
    return {"model": model_sd, "optim": optim_sd, "step": 0}


def apply_state(model, optim, state) -> None:
    from torch.distributed.checkpoint.state_dict import set_state_dict

    set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])


def full_values(state) -> dict:
    """Every tensor of a (possibly DTensor) state dict, gathered whole, as nested lists."""
    from torch.distributed.tensor import DTensor

    out = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, DTensor):
            out[prefix] = value.full_tensor().tolist()
        elif isinstance(value, torch.Tensor):
            out[prefix] = value.tolist()

    walk("", state)
    return out


def _report(out: str, rank: int, payload: dict) -> None:
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(payload, f)


def run_steps(rank: int, steps: list, out: str) -> None:
    """The entry point: run ``steps`` -- ``(name, job, world, store, ckpt)`` -- in order, each
    in its own gloo process group of ``world`` ranks (ranks beyond it sit the step out),
    rendezvousing through the file ``store``: no port is picked ahead and raced for by other
    processes on the machine. Starting processes is the slow part of these tests, so one set
    of processes runs every step. Reports go to ``out/<name>/rank<r>.json``."""
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    for name, job, world, store, ckpt in steps:
        if rank >= world:
            continue
        dist.init_process_group(
            "gloo",
            init_method=f"file://{store}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=120),
        )
        try:
            payload = JOBS[job](rank, world, ckpt)
        except BaseException as err:  # the parent asserts on the report, so errors go there too
            payload = {"error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()}
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        _report(folder, rank, payload)
        dist.destroy_process_group()


# -- jobs --------------------------------------------------------------------------------------
def job_round_trip(rank: int, world: int, ckpt: str) -> dict:
    """Train 2 steps, save (sync and async), load into a fresh model, compare, train on."""
    import torch.distributed.checkpoint as dcp

    import zipsave.dcp

    model, optim = sharded(world)
    for step in range(2):
        train_step(model, optim, step, rank, world)
    state = app_state(model, optim)
    state["step"] = 2
    saved = full_values(state)
    dcp.save(state, storage_writer=zipsave.dcp.ZipWriter(os.path.join(ckpt, "sync")))
    # The same state through DCP's own writer, for consolidation from its layout.
    dcp.save(state, storage_writer=dcp.FileSystemWriter(os.path.join(ckpt, "fs")))
    future = dcp.async_save(state, storage_writer=zipsave.dcp.ZipWriter(os.path.join(ckpt, "async")))
    future.result()
    next_loss = train_step(model, optim, 2, rank, world)

    results = {"saved": saved, "next_loss": next_loss}
    for kind in ("sync", "async"):
        fresh, fresh_optim = sharded(world, seed=99)
        train_step(fresh, fresh_optim, 7, rank, world)  # optimizer state exists and differs
        target = app_state(fresh, fresh_optim)
        zipsave.dcp.load(target, os.path.join(ckpt, kind))
        apply_state(fresh, fresh_optim, target)
        results[f"{kind}_loaded"] = full_values(app_state(fresh, fresh_optim))
        results[f"{kind}_step"] = target["step"]
        results[f"{kind}_next_loss"] = train_step(fresh, fresh_optim, 2, rank, world)
    results["files"] = sorted(os.listdir(os.path.join(ckpt, "sync")))
    return results


def make_big(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Linear(512, 256))


def job_reshard(rank: int, world: int, ckpt: str) -> dict:
    """Load the 4-rank checkpoint into ``world`` ranks and train on; then load the model from
    one ordinary archive (the consolidated one) and count the bytes read from a large one."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import zipsave.dcp

    model, optim = sharded(world, seed=42)
    train_step(model, optim, 9, rank, world)
    state = app_state(model, optim)
    zipsave.dcp.load(state, os.path.join(ckpt, "sync"))
    apply_state(model, optim, state)
    out = {"loaded": full_values(app_state(model, optim)), "step": state["step"]}
    out["next_loss"] = train_step(model, optim, 2, rank, world)

    fresh, fresh_optim = sharded(world, seed=43)
    from_archive = {"model": app_state(fresh, fresh_optim)["model"]}
    zipsave.dcp.load(from_archive, os.path.join(ckpt, "model.zip"))
    out["archive_loaded"] = full_values(from_archive)

    big = make_big(seed=44)
    mesh = init_device_mesh("cpu", (world,))
    fully_shard(big, mesh=mesh)
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    target = {"model": get_model_state_dict(big)}
    zipsave.dcp.load(target, os.path.join(ckpt, "big.zip"))  # warm: imports, page cache
    before = _read_bytes()
    zipsave.dcp.load(target, os.path.join(ckpt, "big.zip"))
    out["big_read_bytes"] = _read_bytes() - before
    out["big_sums"] = {k: float(v.full_tensor().double().sum()) for k, v in target["model"].items()}
    return out


def _read_bytes() -> int:
    with open(f"/proc/{os.getpid()}/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


class _KillingPlanner:
    """Wraps DCP's default save planner; rank 1 dies (SIGKILL) after writing two items."""

    def __new__(cls, rank: int):
        from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

        class Planner(DefaultSavePlanner):
            resolved = 0

            def resolve_data(self, write_item):
                Planner.resolved += 1
                if rank == 1 and Planner.resolved == 3:
                    os.kill(os.getpid(), signal.SIGKILL)
                return super().resolve_data(write_item)

        return Planner()


def job_prepare(rank: int, world: int, ckpt: str) -> dict:
    """One process: consolidate the checkpoint and write a large ordinary archive beside it."""
    import zipsave
    import zipsave.dcp

    zipsave.dcp.consolidate(os.path.join(ckpt, "sync"), os.path.join(ckpt, "model.zip"))
    zipsave.save({"model": make_big(seed=7)}, os.path.join(ckpt, "big.zip"))
    return {}


def job_killed_save(rank: int, world: int, ckpt: str) -> dict:
    """Save a second checkpoint over ``ckpt`` while rank 1 is killed in the middle of writing."""
    import shutil

    import zipsave.dcp

    ckpt = os.path.join(ckpt, "killed")
    if rank == 0:
        shutil.copytree(os.path.join(os.path.dirname(ckpt), "sync"), ckpt)
    dist.barrier()
    model, optim = sharded(world, seed=5)
    for step in range(3):
        train_step(model, optim, step, rank, world)
    try:
        zipsave.dcp.save(app_state(model, optim), ckpt, planner=_KillingPlanner(rank))
    except BaseException as err:
        return {"raised": f"{type(err).__name__}: {err}"}
    return {"raised": None}


JOBS = {
    "round_trip": job_round_trip,
    "prepare": job_prepare,
    "reshard": job_reshard,
    "killed_save": job_killed_save,
}
