"""What the shape checks of a pickled value cost: zipsave's restricted unpickler
(``zipsave._trust.restricted_loads``, the reader of ``data`` pickles, SB3's pickled members and
``.npy`` object arrays) on values of many small objects, where the per-object checks weigh most
(``zipsave._trust._nesting`` as each object is built, ``check_structure`` of the whole value).
Two or more zipsave trees (``--trees name=path,...``, each first on ``sys.path`` in its own fresh
interpreter) are timed in alternation; a figure is the best of ``--loops`` loads in one process,
and a ratio the median of per-pair ratios against the first tree.

Usage::

    git worktree add --detach /tmp/peer 9b56d0d   # before the checks
    python benchmarks/unpickler_shapes.py --trees before=/tmp/peer,after=. --pairs 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_WORKER = r"""
import collections, json, pickle, sys, time
import numpy as np
from zipsave._trust import TrustPolicy, restricted_loads

def infos(n):
    out = np.empty(n, dtype=object)
    out[:] = [{} for _ in range(n)]
    return out

SHAPES = {
    "100k pairs": lambda: [(i, i + 1) for i in range(100_000)],
    "50k nested tuples": lambda: [((i, 1), (2, (3, i))) for i in range(50_000)],
    "one 1M-item tuple": lambda: tuple(range(1_000_000)),
    "300k info dicts": lambda: [{"episode": i, "TimeLimit.truncated": False} for i in range(300_000)],
    "1M {} in an object array": lambda: infos(1_000_000),
    "deque of 100k deques": lambda: collections.deque(collections.deque([i]) for i in range(100_000)),
}
loops = int(sys.argv[1])
out = {}
for name, make in SHAPES.items():
    raw = pickle.dumps(make(), protocol=4)
    best = float("inf")
    for _ in range(loops):
        t = time.perf_counter()
        restricted_loads(raw, TrustPolicy())
        best = min(best, time.perf_counter() - t)
    out[name] = best
print(json.dumps(out))
"""


def _run(tree: str, loops: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=tree)
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, str(loops)], env=env, cwd="/", capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", required=True, help="name=path,... (the first is the reference)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--loops", type=int, default=3)
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    names = list(trees)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for i in range(args.pairs):
        for name in names if i % 2 == 0 else reversed(names):
            runs[name].append(_run(os.path.abspath(trees[name]), args.loops))
    reference = names[0]
    print(f"restricted_loads of pickled values, best of {args.loops} in a process, {args.pairs} pairs of processes")
    for shape in runs[reference][0]:
        cells = []
        for name in names:
            times = [run[shape] for run in runs[name]]
            ratios = [run[shape] / ref[shape] for run, ref in zip(runs[name], runs[reference])]
            cells.append(
                f"{name} {statistics.median(times) * 1e3:.0f} ms"
                + (
                    ""
                    if name == reference
                    else f" = {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
                )
            )
        print(f"{shape:26s} " + " | ".join(cells))


if __name__ == "__main__":
    main()
