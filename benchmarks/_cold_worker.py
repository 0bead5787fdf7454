"""One cold-start measurement (``cold.py``): a fresh interpreter that imports torch, sets up one
memory state, then times the first call of one operation and the same call again.

Usage: ``python _cold_worker.py OP STATE FOLDER N`` prints one JSON object: ``first`` and
``second`` (seconds), ``loop`` (seconds of each load in the loop state), ``modules`` (how many
modules the first call imported) and ``vmstat`` (the kernel's huge-page, compaction and fault
counters over the first call, machine-wide). Nothing of zipsave is imported before the first call.

States: ``quiet`` (nothing but the setup), ``freed`` (a model and Adam state of the same size
were built and freed just before), ``loop`` (five loads one after another, each result freed).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _ops  # noqa: E402

LOOP = 5


def _raw_readinto(path: str, tensors: list[torch.Tensor]) -> None:
    with open(path, "rb", buffering=0) as f:
        for t in tensors:
            f.readinto(t.detach().numpy().data.cast("B"))


def _raw_write_fsync(path: str, tensors: list[torch.Tensor]) -> None:
    with open(path, "wb", buffering=0) as f:
        for t in tensors:
            f.write(t.detach().numpy().data.cast("B"))
        os.fsync(f.fileno())


def _torch_save_fsync(path: str, obj: object) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


_VMSTAT = ("thp_fault_alloc", "thp_fault_fallback", "compact_stall", "compact_fail", "compact_success", "pgfault")


def _vmstat() -> dict[str, int]:
    """The kernel's counters of huge-page faults, compaction stalls and page faults."""
    try:
        with open("/proc/vmstat") as f:
            return {k: int(v) for k, v in (line.split() for line in f) if k in _VMSTAT}
    except OSError:
        return {}


def prepare(folder: str, n: float) -> None:
    """The three input files: zipsave's archive, ``torch.save``'s file, the raw bytes."""
    import zipsave

    os.makedirs(folder, exist_ok=True)
    policy, optimizer = _ops.build_model(n, _ops.SEED_SAVED)
    zipsave.save(_ops.app_state(policy, optimizer), os.path.join(folder, _ops.FILES["zipsave"]))
    torch.save(_ops.state_dicts(policy, optimizer), os.path.join(folder, _ops.FILES["torch"]))
    _raw_write_fsync(os.path.join(folder, _ops.FILES["raw"]), _ops.state_tensors(policy, optimizer))


def main() -> None:
    op, state, folder, n = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    if op == "prepare":
        return prepare(folder, n)
    files = {k: os.path.join(folder, v) for k, v in _ops.FILES.items()}
    scratch = os.path.join(folder, f"out-{os.getpid()}")
    live = None
    if op in ("zipsave_restore", "raw_readinto", "zipsave_save", "torch_save_fsync", "raw_write_fsync"):
        live = _ops.build_model(n, _ops.SEED_TARGET)  # restores write into it; saves write it out
    if state == "freed":
        gone = _ops.build_model(n, _ops.SEED_TARGET + 1)
        del gone
        gc.collect()
    tensors = _ops.state_tensors(*live) if live is not None else []

    def call() -> object:
        if op == "zipsave_load":
            import zipsave

            return zipsave.load(files["zipsave"])
        if op == "zipsave_load_archive":
            import zipsave

            return zipsave.load_archive(files["zipsave"])
        if op == "zipsave_inspect":
            import zipsave

            return zipsave.inspect(files["zipsave"])
        if op == "zipsave_restore":
            import zipsave

            return zipsave.restore(_ops.app_state(*live), files["zipsave"])
        if op == "zipsave_save":
            import zipsave

            return zipsave.save(_ops.app_state(*live), scratch + ".zip")
        if op == "torch_load":
            return torch.load(files["torch"], weights_only=True)
        if op == "raw_readinto":
            return _raw_readinto(files["raw"], tensors)
        if op == "torch_save_fsync":
            return _torch_save_fsync(scratch + ".pt", _ops.state_dicts(*live))
        if op == "raw_write_fsync":
            return _raw_write_fsync(scratch + ".bin", tensors)
        raise SystemExit(f"unknown op {op!r}")

    before = len(sys.modules)
    loop: list[float] = []
    counters = _vmstat()
    t0 = time.perf_counter()
    result = call()
    first = time.perf_counter() - t0
    vmstat = {k: v - counters[k] for k, v in _vmstat().items() if k in counters}  # machine-wide, during the call
    modules = len(sys.modules) - before
    del result
    gc.collect()
    if state == "loop":
        for _ in range(LOOP - 1):
            t0 = time.perf_counter()
            result = call()
            loop.append(time.perf_counter() - t0)
            del result
            gc.collect()
    t0 = time.perf_counter()
    result = call()
    second = time.perf_counter() - t0
    del result
    for suffix in (".zip", ".pt", ".bin"):
        if os.path.exists(scratch + suffix):
            os.remove(scratch + suffix)
    print(
        json.dumps(
            {
                "first": first,
                "second": second,
                "loop": loop,
                "modules": modules,
                "vmstat": vmstat,
                "huge_pages": os.environ.get("ZIPSAVE_HUGE_PAGES", ""),
            }
        )
    )


if __name__ == "__main__":
    main()
