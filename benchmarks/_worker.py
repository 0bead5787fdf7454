"""Run one benchmark operation in this (fresh) interpreter and print one JSON line.

Usage (the driver does this): ``python benchmarks/_worker.py '{"op": ..., "n": ..., ...}'``,
or ``{"prepare": true, ...}`` to write a size's input files.

Memory: after setup the heap is trimmed and the kernel's peak-RSS counter is reset through
``/proc/self/clear_refs``; the op's extra memory is ``VmHWM`` after it minus ``VmRSS`` before.
Regimes: ``prefault`` touches and frees 1.25x the op's bytes just before the op, so freed
pages the op allocates are already backed by the host; ``asis`` waits until freed memory has
been handed back to the host (free page reporting), so the op pays for first touch.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import time
import traceback

_LIBC = None


def _malloc_trim() -> None:
    global _LIBC
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL("libc.so.6")
        _LIBC.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _status(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _warm(path: str) -> None:
    """Read ``path`` once (untimed) so the op reads from the page cache, as a user who just
    saved or copied the file would."""
    buf = bytearray(8 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def _context(op, n: float, folder: str, out: str):
    """Untimed setup of one op: the live model, the touched buffer, the warmed input file."""
    import _catalog
    import _ops
    import numpy as np

    ctx = _ops.Ctx(n=n, folder=folder, out=out)
    if os.path.exists(out):
        os.unlink(out)
    if op.model:
        seed = _ops.SEED_SAVED if op.group == "save" else _ops.SEED_TARGET
        ctx.policy, ctx.optimizer = _ops.build_model(n, seed)
    if op.name.startswith(("raw_", "cuda_raw_")):
        ctx.buffer = np.empty(_ops.model_bytes(n)[1], dtype=np.uint8)
        ctx.buffer.fill(7)  # touched: a readinto/write floor into existing memory
    setup = _catalog.SETUPS.get(op.name)
    if setup is not None:
        setup(ctx)
    if op.reads:
        _warm(ctx.path(op.reads))
    return ctx


def _cleanup(ctx) -> None:
    if os.path.exists(ctx.out):
        os.unlink(ctx.out)


def run_op(spec: dict, name: str) -> dict:
    import _catalog
    import _ops
    import numpy as np

    op = _catalog.BY_NAME[name]
    n = spec["n"]
    if op.needs:
        import zipsave

        if not hasattr(zipsave, op.needs):
            return {"skipped": f"zipsave.{op.needs} does not exist in this checkout"}
    ext = {"zipsave": ".zip", "sb3": ".zip", "torch": ".pt", "safetensors": ".safetensors"}.get(name.split("_")[0], ".bin")
    out = os.path.join(spec["scratch"], f"out-{name}-{spec['regime']}-{spec['rep']}{ext}")
    first_call = None
    if spec.get("warm_folder"):
        # One untimed call on a tiny model first: lazy imports and first-call initialisation
        # are one-time costs of a process, reported apart as `first_call_s`.
        warm = _context(op, _ops.WARM_N, spec["warm_folder"], out)
        t0 = time.perf_counter()
        op.body(warm)
        first_call = time.perf_counter() - t0
        _cleanup(warm)
        del warm
    ctx = _context(op, n, spec["folder"], out)
    moved = _ops.moved_bytes(op, n)
    if not spec.get("batch"):
        os.sync()  # earlier saves' dirty pages are not written back during this op

    gc.collect()
    if spec["regime"] == "prefault":
        scratch = np.ones(int(1.25 * max(moved, 1 << 20)), dtype=np.uint8)
        del scratch
    _malloc_trim()
    if spec["regime"] == "asis":
        time.sleep(float(spec.get("asis_wait", 3.0)))
    peak_ok = _reset_peak()
    base = _status("VmRSS")
    gc.disable()
    t0 = time.perf_counter()
    op.body(ctx)
    seconds = time.perf_counter() - t0
    gc.enable()
    hwm = _status("VmHWM") if peak_ok else None
    record = {
        "seconds": seconds,
        "bytes": moved,
        "delta_rss": (hwm - base) if (hwm is not None and base is not None) else None,
        "first_call_s": first_call,
    }
    if spec.get("check") and op.check is not None:
        op.check(ctx)
        record["checked"] = True
    _cleanup(ctx)
    return record


def run(spec: dict) -> dict:
    import _ops
    import torch

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    if spec.get("prepare"):
        return {"prepared": _ops.prepare(spec["folder"], spec["n"])}
    if spec.get("batch"):
        # --smoke: the inputs and every op of one size in this process, one after the other.
        _ops.prepare(spec["folder"], spec["n"])
        out = {}
        for name in spec["ops"]:
            try:
                out[name] = run_op(spec, name)
            except Exception as err:  # noqa: BLE001 - reported; the driver decides what a failure means
                out[name] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        return {"batch": out}
    return run_op(spec, spec["op"])


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        out = run(spec)
    except Exception as err:  # noqa: BLE001 - reported; the driver decides what a failure means
        out = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
