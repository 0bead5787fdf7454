"""What does checkpointing cost a training loop? Training steps with no checkpoint, against
the same steps with one ``zipsave.CheckpointManager`` checkpoint, saved blocking or in the
background, as ratios of loop time.

Model: 4 x Linear(w, w) plus Adam (12 bytes per parameter: 120 MB at 1e7 parameters). A
training step is a forward/backward/Adam step on a batch of 32. The loop is cut into
segments of about ``--interval`` seconds of training (the step count is calibrated first).
A checkpoint segment starts with ``manager.save(...)`` and ends when the checkpoint is
durable and listed (``manager.wait()``), so everything a checkpoint costs the loop, including
the background writer competing for cores, is inside it. Plain and checkpoint segments
alternate (ABBA order, ``--pairs`` pairs per mode) so that drifts of a shared machine cancel;
reported are medians over pairs: the ratio checkpoint segment / plain segment at that
interval, the extra seconds per checkpoint, the time ``save`` blocked the loop, and the
overhead at one checkpoint a minute (extra seconds / 60 s of training).

Usage::

    python benchmarks/checkpointing.py                  # 1e7 parameters, 5 s segments
    python benchmarks/checkpointing.py --interval 60    # the real cadence, one a minute
    python benchmarks/checkpointing.py --smoke          # a few seconds, for CI
"""

from __future__ import annotations

import argparse
import json
import os
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


def segment(state: dict, steps: int, manager: zipsave.CheckpointManager | None) -> tuple[float, float]:
    """Seconds for ``steps`` training steps, with one checkpoint at the start when a manager
    is given (until it is durable), and the seconds ``save`` blocked the loop."""
    start = time.perf_counter()
    blocked = 0.0
    if manager is not None:
        manager.save(state["step"], state, metrics={"step": state["step"]}, force=True)
        blocked = time.perf_counter() - start
    for _ in range(steps):
        train_step(state)
    if manager is not None:
        manager.wait()
    return time.perf_counter() - start, blocked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="1e7", help="parameter count of the model")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds of training per segment")
    parser.add_argument("--pairs", type=int, default=6, help="plain/checkpoint segment pairs per mode")
    parser.add_argument("--smoke", action="store_true", help="a tiny model and loop, for CI")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.smoke:
        args.params, args.interval, args.pairs = "1e5", 0.2, 2
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

    result = {
        "params": int(float(args.params)),
        "state_mb": nbytes(state) / 1e6,
        "step_ms": step_s * 1e3,
        "steps_per_segment": every,
        "interval_s": args.interval,
        "pairs": args.pairs,
    }
    print(
        f"{result['params']:,} parameters ({result['state_mb']:.0f} MB with Adam), {step_s * 1e3:.1f} ms per step, "
        f"segments of {every} steps (~{every * step_s:.1f} s), {args.pairs} pairs per mode"
    )
    print(f"{'mode':>11} {'ckpt / plain':>13} {'extra s/ckpt':>13} {'blocked s':>10} {'at 1 ckpt/min':>14}")
    with tempfile.TemporaryDirectory(prefix="zipsave-ckpt-bench-") as tmp:
        zipsave.save(state, os.path.join(tmp, "warm.zip"))  # imports, thread pools, page cache
        for mode in ("blocking", "background"):
            folder = os.path.join(tmp, mode)
            ratios, extras, blocked = [], [], []
            with zipsave.CheckpointManager(folder, keep_last=2, background=mode == "background") as manager:
                for pair in range(args.pairs):
                    order = (None, manager) if pair % 2 == 0 else (manager, None)
                    timed = {id(m): segment(state, every, m) for m in order}
                    (plain, _), (ckpt, stall) = timed[id(None)], timed[id(manager)]
                    ratios.append(ckpt / plain)
                    extras.append(ckpt - plain)
                    blocked.append(stall)
            extra = statistics.median(extras)
            result[mode] = {
                "segment_ratio": statistics.median(ratios),
                "extra_s_per_checkpoint": extra,
                "blocked_s_per_checkpoint": statistics.median(blocked),
                "overhead_at_one_per_minute": extra / 60.0,
                "ratios": ratios,
            }
            print(
                f"{mode:>11} {result[mode]['segment_ratio']:>13.3f} {extra:>13.3f} "
                f"{result[mode]['blocked_s_per_checkpoint']:>10.3f} {extra / 60.0 * 100:>13.2f}%"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "zipsave": zipsave.__version__, **result}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
