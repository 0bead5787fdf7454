"""Sharded checkpoints: zipsave's DCP storage against DCP's own FileSystemWriter/Reader.

A model of ``--params`` float32 parameters (8 square layers) is sharded row-wise over
``--world`` ranks as DTensors (each rank holds only its shard) on CPU/gloo, processes on
127.0.0.1. Per repetition, in the same processes, alternating which storage goes first:

* ``save``: ``dcp.save`` with ``zipsave.dcp.ZipWriter`` vs ``FileSystemWriter`` (both fsync),
  wall time from a barrier before to a barrier after, on rank 0;
* ``load``: ``dcp.load`` into preallocated shards with ``ZipReader`` vs ``FileSystemReader``
  (from the page cache for both: the files were just written);
* ``consolidate``: on rank 0, ``zipsave.dcp.consolidate`` of each checkpoint into one archive
  vs torch's ``dcp_to_torch_save`` into one ``torch.save`` file.

Figures are medians; ratios are zipsave / DCP (below 1: zipsave is faster).

Usage::

    python benchmarks/dcp.py                    # 1e8 parameters, 2 ranks, 3 repetitions
    python benchmarks/dcp.py --params 1e7 --reps 5
    python benchmarks/dcp.py --smoke            # seconds, for CI
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LAYERS = 8


def shard_state(n_params: float, rank: int, world: int) -> dict:
    """Row shards of LAYERS square float32 weights as DTensors (Shard(0)) on a CPU mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    width = int((float(n_params) / LAYERS) ** 0.5) // world * world
    mesh = init_device_mesh("cpu", (world,))
    rows = width // world
    gen = torch.Generator().manual_seed(rank)
    state = {}
    for i in range(LAYERS):
        local = torch.randn(rows, width, generator=gen)
        state[f"layer{i}.weight"] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False)
    return {"model": state}


def zeros_like(state: dict) -> dict:
    from torch.distributed.tensor import DTensor

    return {
        "model": {
            k: DTensor.from_local(torch.zeros_like(v.to_local()), v.device_mesh, v.placements, run_check=False)
            for k, v in state["model"].items()
        }
    }


def timed(fn) -> float:
    dist.barrier()
    start = time.perf_counter()
    fn()
    dist.barrier()
    return time.perf_counter() - start


def worker(rank: int, world: int, port: int, args: argparse.Namespace, out: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    import zipsave.dcp

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(minutes=30))
    state = shard_state(args.params, rank, world)
    target = zeros_like(state)
    root = args.dir
    zip_dir, fs_dir = os.path.join(root, "zipsave"), os.path.join(root, "dcp")
    times: dict[str, list[float]] = {
        k: []
        for k in (
            "save_zipsave",
            "save_dcp",
            "load_zipsave",
            "load_dcp",
            "consolidate_zipsave",
            "consolidate_dcp_dir",
            "dcp_to_torch_save",
        )
    }
    for rep in range(args.reps):
        order = ["zipsave", "dcp"] if rep % 2 == 0 else ["dcp", "zipsave"]
        for kind in order:
            if kind == "zipsave":
                times["save_zipsave"].append(
                    timed(lambda: dcp.save(state, storage_writer=zipsave.dcp.ZipWriter(zip_dir)))
                )
            else:
                times["save_dcp"].append(timed(lambda: dcp.save(state, storage_writer=dcp.FileSystemWriter(fs_dir))))
        for kind in order:
            if kind == "zipsave":
                times["load_zipsave"].append(
                    timed(lambda: dcp.load(target, storage_reader=zipsave.dcp.ZipReader(zip_dir)))
                )
            else:
                times["load_dcp"].append(timed(lambda: dcp.load(target, storage_reader=dcp.FileSystemReader(fs_dir))))
        for key, value in target["model"].items():
            assert torch.equal(value.to_local(), state["model"][key].to_local())
        if rank == 0:
            one = os.path.join(root, "one.zip")
            for key, fn in (
                ("consolidate_zipsave", lambda one=one: zipsave.dcp.consolidate(zip_dir, one)),
                ("consolidate_dcp_dir", lambda one=one: zipsave.dcp.consolidate(fs_dir, one)),
                ("dcp_to_torch_save", lambda: dcp_to_torch_save(fs_dir, os.path.join(root, "one.pt"))),
            ):
                start = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - start)
        dist.barrier()
    if rank == 0:
        sizes = {
            name: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
            for name, d in (("zipsave", zip_dir), ("dcp", fs_dir))
        }
        with open(out, "w") as f:
            json.dump({"times": times, "bytes": sizes}, f)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=1e8)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="1e6 parameters, 1 repetition")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.smoke:
        args.params, args.reps = 1e6, 1
    with tempfile.TemporaryDirectory(prefix="zipsave-dcp-bench-") as root:
        args.dir = root
        result_path = os.path.join(root, "result.json")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(worker, args=(args.world, port, args, result_path), nprocs=args.world, join=True)
        with open(result_path) as f:
            result = json.load(f)
        for name in ("zipsave", "dcp", "one.zip", "one.pt"):
            path = os.path.join(root, name)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else None
    med = {k: statistics.median(v) for k, v in result["times"].items()}
    gb = 4 * args.params / 1e9
    report = {
        "params": args.params,
        "world": args.world,
        "reps": args.reps,
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "median_s": med,
        "times_s": result["times"],
        "bytes": result["bytes"],
        "ratios": {
            "save zipsave/dcp": med["save_zipsave"] / med["save_dcp"],
            "load zipsave/dcp": med["load_zipsave"] / med["load_dcp"],
            "consolidate zipsave/dcp_to_torch_save": med["consolidate_zipsave"] / med["dcp_to_torch_save"],
        },
    }
    print(f"{args.params:.0e} float32 parameters ({gb:.2f} GB) over {args.world} ranks, {args.reps} reps, medians:")
    for key, value in med.items():
        print(f"  {key:22s} {value:8.3f} s")
    for key, value in report["ratios"].items():
        print(f"  ratio {key:38s} {value:.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
