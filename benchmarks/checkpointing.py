"""What does checkpointing cost a training loop? The same loop of training steps with no
checkpoints, with a ``zipsave.CheckpointManager`` saving blocking, and saving in the
background, as ratios of loop time.

Model: 4 x Linear(w, w) plus Adam (12 bytes per parameter: 120 MB at 1e7 parameters). A
training step is a forward/backward/Adam step on a batch of 32. The loop runs
``--checkpoints`` checkpoints, one per ``--interval`` seconds of training (the step count per
checkpoint is calibrated from the loop without checkpoints); ``keep_last=2``, so old
checkpoints are deleted as in a real run. The three loops run interleaved, ``--reps`` times,
in one process, warm. Reported: the median ratio of each loop's time to the plain loop's in
the same repetition, the extra loop time per checkpoint, and from it the overhead at one
checkpoint per minute (extra per checkpoint / 60 s).

Usage::

    python benchmarks/checkpointing.py                         # 1e7 parameters, 5 s interval
    python benchmarks/checkpointing.py --interval 60 --checkpoints 2 --reps 2   # the real cadence
    python benchmarks/checkpointing.py --smoke                 # a few seconds, for CI
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

import zipsave


def make_state(n_params: float) -> dict:
    width = max(8, int((float(n_params) / 4) ** 0.5))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
    optim = torch.optim.Adam(model.parameters(), lr=1e-4)
    return {"model": model, "optim": optim, "step": 0}


def train_step(state: dict) -> None:
    model, optim = state["model"], state["optim"]
    optim.zero_grad()
    model(torch.randn(32, model[0].in_features)).pow(2).mean().backward()
    optim.step()
    state["step"] += 1


def nbytes(state: dict) -> int:
    total = sum(p.numel() * p.element_size() for p in state["model"].parameters())
    for s in state["optim"].state.values():
        total += sum(v.numel() * v.element_size() for v in s.values() if isinstance(v, torch.Tensor))
    return total


def run_loop(state: dict, steps: int, every: int, mode: str, folder: str) -> tuple[float, list[float]]:
    """Seconds for ``steps`` training steps (``mode``: none, blocking, background), and the
    time each checkpointing ``save`` call blocked the loop."""
    shutil.rmtree(folder, ignore_errors=True)
    manager = None if mode == "none" else zipsave.CheckpointManager(
        folder, keep_last=2, every_steps=every, background=mode == "background"
    )
    stalls = []
    start = time.perf_counter()
    for _ in range(steps):
        train_step(state)
        if manager is not None and manager.due(state["step"]):
            t0 = time.perf_counter()
            manager.save(state["step"], state, metrics={"step": state["step"]})
            stalls.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    if manager is not None:
        manager.close()  # the last background save, outside the loop's time, as in a long run
    return elapsed, stalls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="1e7", help="parameter count of the model")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds of training between checkpoints")
    parser.add_argument("--checkpoints", type=int, default=4, help="checkpoints per loop")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="a tiny model and loop, for CI")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.smoke:
        args.params, args.interval, args.checkpoints, args.reps = "1e5", 0.2, 2, 1
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))

    state = make_state(float(args.params))
    for _ in range(5):
        train_step(state)  # warm-up: Adam's state exists from here on
    t0 = time.perf_counter()
    calibration = 0
    while time.perf_counter() - t0 < min(2.0, args.interval):
        train_step(state)
        calibration += 1
    step_s = (time.perf_counter() - t0) / calibration
    every = max(1, round(args.interval / step_s))
    steps = every * args.checkpoints

    rows: dict[str, list] = {"none": [], "blocking": [], "background": []}
    with tempfile.TemporaryDirectory(prefix="zipsave-ckpt-bench-") as tmp:
        zipsave.save(state, os.path.join(tmp, "warm.zip"))  # imports, thread pools, page cache
        for _ in range(args.reps):
            for mode in rows:
                rows[mode].append(run_loop(state, steps, every, mode, os.path.join(tmp, mode)))

    base = [t for t, _ in rows["none"]]
    result = {
        "params": int(float(args.params)),
        "state_mb": nbytes(state) / 1e6,
        "step_ms": step_s * 1e3,
        "steps_per_checkpoint": every,
        "interval_s": args.interval,
        "checkpoints_per_loop": args.checkpoints,
        "reps": args.reps,
        "loop_none_s": statistics.median(base),
    }
    print(
        f"{result['params']:,} parameters ({result['state_mb']:.0f} MB with Adam), {step_s * 1e3:.1f} ms per step, "
        f"a checkpoint every {every} steps (~{args.interval:g} s), {args.checkpoints} per loop, {args.reps} reps"
    )
    print(f"{'mode':>11} {'loop / none':>12} {'extra s/ckpt':>13} {'stall s/ckpt':>13} {'at 1 ckpt/min':>14}")
    for mode in ("blocking", "background"):
        times = [t for t, _ in rows[mode]]
        stalls = [s for _, ss in rows[mode] for s in ss]
        ratio = statistics.median(t / b for t, b in zip(times, base))
        extra = statistics.median((t - b) / args.checkpoints for t, b in zip(times, base))
        per_minute = extra / 60.0
        result[mode] = {
            "loop_s": statistics.median(times),
            "loop_vs_none": ratio,
            "extra_s_per_checkpoint": extra,
            "stall_s_per_checkpoint": statistics.median(stalls) if stalls else 0.0,
            "overhead_at_one_per_minute": per_minute,
        }
        print(
            f"{mode:>11} {ratio:>12.3f} {extra:>13.3f} {result[mode]['stall_s_per_checkpoint']:>13.3f} "
            f"{per_minute * 100:>13.2f}%"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "zipsave": zipsave.__version__, **result}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
