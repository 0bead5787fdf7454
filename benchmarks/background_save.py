"""How long does a save block the training loop? A plain ``zipsave.save`` against
``zipsave.save(..., background=True)``, which returns once the tensors are copied.

Model: 4 x Linear(w, w) plus Adam after one step (parameters + 2 moments = 12 bytes per
parameter). For each size and repetition, in one process, warm:

* ``plain``: wall time of ``zipsave.save(state, path)`` (atomic write + fsync);
* ``blocked``: wall time of ``zipsave.save(state, path, background=True)``, i.e. until the
  training loop may go on (collect + encode + copy of every tensor storage);
* ``total``: from that call until ``handle.wait()`` returns;
* ``loop``: a loop of training steps with one save per ``--every`` steps, plain against
  background saves, as a check that the copy is all the loop pays.

Usage::

    python benchmarks/background_save.py                 # 1e6 and 1e7 parameters
    python benchmarks/background_save.py --sizes 1e6,1e7,1e8 --reps 5
    python benchmarks/background_save.py --smoke         # a few seconds, for CI
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
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, width)).sum().backward()
    optim.step()
    return {"model": model, "optim": optim, "step": 1}


def train_step(state: dict) -> None:
    model, optim = state["model"], state["optim"]
    width = model[0].in_features
    optim.zero_grad()
    model(torch.randn(32, width)).pow(2).mean().backward()
    optim.step()


def nbytes(state: dict) -> int:
    total = sum(p.numel() * p.element_size() for p in state["model"].parameters())
    for s in state["optim"].state.values():
        total += sum(v.numel() * v.element_size() for v in s.values() if isinstance(v, torch.Tensor))
    return total


def measure(n_params: float, reps: int, folder: str, loop_steps: int, every: int) -> dict:
    state = make_state(n_params)
    path = os.path.join(folder, "ckpt.zip")
    zipsave.save(state, path)  # warm-up: page cache, imports, thread pools
    plain, blocked, total = [], [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        zipsave.save(state, path)
        plain.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        handle = zipsave.save(state, path, background=True)
        blocked.append(time.perf_counter() - t0)
        handle.wait()
        total.append(time.perf_counter() - t0)

    def loop(background: bool) -> float:
        handles = []
        t0 = time.perf_counter()
        for i in range(1, loop_steps + 1):
            train_step(state)
            if i % every == 0:
                result = zipsave.save(state, path, background=background)
                if background:
                    handles.append(result)
        elapsed = time.perf_counter() - t0
        for h in handles:
            h.wait()
        return elapsed

    loop_plain = loop(False)
    loop_background = loop(True)
    return {
        "params": int(float(n_params)),
        "state_mb": nbytes(state) / 1e6,
        "plain_s": statistics.median(plain),
        "blocked_s": statistics.median(blocked),
        "background_total_s": statistics.median(total),
        "blocked_vs_plain": statistics.median(b / p for b, p in zip(blocked, plain)),
        "loop_steps": loop_steps,
        "saves_in_loop": loop_steps // every,
        "loop_plain_s": loop_plain,
        "loop_background_s": loop_background,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7", help="comma-separated parameter counts")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--loop-steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10, help="save every this many training steps")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    sizes = ["1e5"] if args.smoke else args.sizes.split(",")
    reps = 1 if args.smoke else args.reps
    loop_steps, every = (4, 2) if args.smoke else (args.loop_steps, args.every)
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))

    rows = []
    with tempfile.TemporaryDirectory(prefix="zipsave-bg-bench-") as folder:
        for size in sizes:
            rows.append(measure(float(size), reps, folder, loop_steps, every))
    header = (
        f"{'params':>11} {'state MB':>9} {'plain s':>9} {'blocked s':>10} {'bg total s':>11} "
        f"{'blocked/plain':>14} {'loop plain s':>13} {'loop bg s':>10}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['params']:>11,} {r['state_mb']:>9.1f} {r['plain_s']:>9.4f} {r['blocked_s']:>10.4f} "
            f"{r['background_total_s']:>11.4f} {r['blocked_vs_plain']:>14.2f} {r['loop_plain_s']:>13.3f} "
            f"{r['loop_background_s']:>10.3f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "zipsave": zipsave.__version__, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
