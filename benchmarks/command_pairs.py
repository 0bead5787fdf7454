"""The whole ``zipsave`` command in a fresh process (``python -m zipsave inspect X.zip``: the
interpreter's start, every import, the subcommand, the exit), this tree against a peer tree in
alternating pairs: wall time (what a user waits for) and the process's CPU time (user + system,
from the kernel's accounting of the child). Prints medians and the load average beside them, and
with ``--out`` writes every run as JSON.

Usage::

    git worktree add --detach /tmp/peer main
    python benchmarks/command_pairs.py --peer /tmp/peer --pairs 10 -- inspect X.zip
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _run(tree: str, args: list[str]) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=tree)
    before = os.times()
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "zipsave", *args], env=env, cwd="/", capture_output=True, check=True)
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"wall_s": wall, "cpu_s": cpu, "load1": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="the other zipsave tree")
    parser.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--out", help="write every run here as JSON")
    parser.add_argument("args", nargs="+", help="the command's arguments (after --)")
    opts = parser.parse_args()
    trees = {"peer": os.path.abspath(opts.peer), "this": os.path.abspath(opts.tree)}
    args = [os.path.abspath(a) if os.path.exists(a) else a for a in opts.args]
    for tree in trees.values():  # bytecode caches written first, as an install writes them
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(tree, "zipsave")], check=True)
        _run(tree, args)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for i in range(opts.pairs):
        for name in trees if i % 2 == 0 else reversed(trees):
            runs[name].append(_run(trees[name], args))
    loads = [r["load1"] for values in runs.values() for r in values]
    print(f"python -m zipsave {' '.join(opts.args)}: {opts.pairs} alternating pairs of fresh processes")
    print(
        f"load average (1 min) during the runs: median {statistics.median(loads):.2f}, {min(loads):.2f}-{max(loads):.2f}"
    )
    summary: dict[str, dict[str, float]] = {}
    for name, values in runs.items():
        wall = statistics.median(r["wall_s"] for r in values)
        cpu = statistics.median(r["cpu_s"] for r in values)
        summary[name] = {"wall_median_s": wall, "cpu_median_s": cpu}
        print(f"{name:>5} ({trees[name]}): wall median {wall:.3f} s, CPU median {cpu:.3f} s")
    ratios = [t["wall_s"] / p["wall_s"] for p, t in zip(runs["peer"], runs["this"])]
    print(f"this / peer, wall: {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
    if opts.out:
        with open(opts.out, "w", encoding="utf-8") as f:
            json.dump({"args": opts.args, "trees": trees, "summary": summary, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
