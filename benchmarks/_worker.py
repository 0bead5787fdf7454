"""Run one benchmark operation in this (fresh) interpreter and print one JSON line.

Usage (the driver does this): ``python benchmarks/_worker.py '{"op": ..., "n": ..., ...}'``,
or ``{"prepare": true, ...}`` to write a size's input files.

Memory: after setup the heap is trimmed and the kernel's peak-RSS counter is reset through
``/proc/self/clear_refs``; the op's extra memory is ``VmHWM`` after it minus ``VmRSS`` before
(``_proc.measure``). Regimes: ``prefault`` touches and frees 1.25x the op's bytes just before
the op, so freed pages the op allocates are already backed by the host; ``asis`` waits until
freed memory has been handed back to the host (free page reporting), so the op pays for first
touch. A ``fresh`` op (``_ops_first.py``) is its interpreter's first call: no warm-up, and it
refuses to run where zipsave, SB3 or safetensors was imported before its timer.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from _proc import answer, measure, warm


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
        warm(ctx.path(op.reads))
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
    if op.needs and not op.fresh:
        import zipsave

        if not hasattr(zipsave, op.needs):
            return {"skipped": f"zipsave.{op.needs} does not exist in this checkout"}
    ext = {"zipsave": ".zip", "sb3": ".zip", "torch": ".pt", "safetensors": ".safetensors"}.get(
        name.split("_")[0], ".bin"
    )
    out = os.path.join(spec["scratch"], f"out-{name}-{spec['regime']}-{spec['rep']}{ext}")
    first_call = None
    if spec.get("warm_folder") and not op.fresh:
        # One untimed call on a tiny model first: lazy imports and first-call initialisation
        # are one-time costs of a process, reported apart as `first_call_s`.
        warm_ctx = _context(op, _ops.WARM_N, spec["warm_folder"], out)
        t0 = time.perf_counter()
        op.body(warm_ctx)
        first_call = time.perf_counter() - t0
        _cleanup(warm_ctx)
        del warm_ctx
    ctx = _context(op, n, spec["folder"], out)
    moved = _ops.moved_bytes(op, n)
    if not spec.get("batch"):
        os.sync()  # earlier saves' dirty pages are not written back during this op

    def prefault() -> None:
        scratch = np.ones(int(1.25 * max(moved, 1 << 20)), dtype=np.uint8)
        del scratch

    before = _not_fresh() if op.fresh else None
    if before:
        raise RuntimeError(
            f"{name} must be the first load of a fresh interpreter, but {before} were imported "
            "before its timer (run it in a worker of its own, not in a batch)"
        )
    modules = len(sys.modules)
    record = measure(
        lambda: op.body(ctx),
        prefault=prefault if spec["regime"] == "prefault" else None,
        wait=float(spec.get("asis_wait", 3.0)) if spec["regime"] == "asis" else 0.0,
    )
    record |= {"bytes": moved, "first_call_s": first_call}
    if op.fresh:
        import _ops_first

        record["imported"] = [m for m in _ops_first.INTEGRATIONS if m in sys.modules]
        record["new_modules"] = len(sys.modules) - modules
        record["import_s"] = ctx.extra.get("import_s")
        if set(op.forbids) & set(record["imported"]):
            raise AssertionError(
                f"{name}: the first load imported {record['imported']}, of which it forbids "
                f"{sorted(set(op.forbids) & set(record['imported']))}; an integration is imported "
                "only when the archive names it or the caller passes one of its classes"
            )
    if spec.get("check") and op.check is not None:
        op.check(ctx)
        record["checked"] = True
    _cleanup(ctx)
    return record


def _not_fresh() -> list[str]:
    """Top-level packages of :data:`_ops_first.NOT_BEFORE` already imported in this interpreter."""
    import _ops_first

    return sorted({m.partition(".")[0] for m in sys.modules} & set(_ops_first.NOT_BEFORE))


def run(spec: dict) -> dict:
    import _catalog
    import torch

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    if spec.get("prepare"):
        return {"prepared": _catalog.prepare(spec["folder"], spec["n"], spec.get("ops"))}
    if spec.get("batch"):
        # --smoke: the inputs and every op of one size in this process, one after the other.
        _catalog.prepare(spec["folder"], spec["n"], spec.get("inputs", spec["ops"]))
        out = {}
        for name in spec["ops"]:
            try:
                out[name] = run_op(spec, name)
            except Exception as err:  # noqa: BLE001 - reported; the driver decides what a failure means
                out[name] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        return {"batch": out}
    return run_op(spec, spec["op"])


if __name__ == "__main__":
    answer(run, json.loads(sys.argv[1]))
