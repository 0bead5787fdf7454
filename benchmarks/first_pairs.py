"""The first call of a verb in a fresh interpreter (``import zipsave`` included, after ``import
torch``), this tree against a peer tree in alternating pairs of processes: small differences
(a millisecond) that the shuffled repetitions of ``cold.py`` cannot resolve on a shared VM.
Each process times the first call and then the same call again; a pair's ratio divides this
tree's first call by the peer's. ``--verb cli_inspect`` (``cli_verify``) times the ``zipsave``
command's module and its ``inspect`` (``verify``) subcommand instead, its output dropped; ``--verb
save`` times a save of a 9 868-parameter MLP with its Adam state (built before the clock starts)
to ``--archive``, ``--verb restore`` a restore of such an archive into them. ``--clock cpu`` times the process's CPU (``time.process_time``: every thread)
instead of the wall clock, ``--clock thread`` the calling thread's CPU (``time.thread_time``:
neither other processes on a shared VM nor torch's intra-op threads, which spin for a while
after an operation such as the backward pass of ``--verb save``, count; zipsave's helper threads
do not either, and a small archive uses none). Prints medians and the median of the per-pair ratios and
differences.

Usage::

    git worktree add --detach /tmp/peer main
    python benchmarks/first_pairs.py --peer /tmp/peer --verb load --archive model.zip --pairs 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

_CALL = r"""
import contextlib, io, sys, time
import torch
verb, archive = sys.argv[1], sys.argv[2]
clock = {"cpu": time.process_time, "thread": time.thread_time}.get(sys.argv[3], time.perf_counter)
if verb in ("save", "restore"):  # the model and its stepped optimizer are built before the clock starts
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 12))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 64)).sum().backward()
    optimizer.step()
t0 = clock()
if verb == "save":
    import zipsave
    call = lambda: zipsave.save({"model": model, "optimizer": optimizer, "step": 3}, archive)
elif verb == "restore":  # into that model and optimizer (an archive `--verb save` wrote)
    import zipsave
    call = lambda: zipsave.restore({"model": model, "optimizer": optimizer}, archive)
elif verb.startswith("cli_"):  # the command's own imports, then the subcommand (its output dropped)
    import zipsave.cli
    call = lambda: zipsave.cli.main([verb[4:], archive])
else:
    import zipsave
    call = lambda: getattr(zipsave, verb)(archive)
with contextlib.redirect_stdout(io.StringIO()):
    call()
    t1 = clock()
    call()
    t2 = clock()
print((t1 - t0) * 1e3, (t2 - t1) * 1e3)
"""


def _run(tree: str, verb: str, archive: str, clock: str = "wall") -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run(
        [sys.executable, "-c", _CALL, verb, archive, clock],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    )
    first, second = map(float, out.stdout.split())
    return first, second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="the other zipsave tree")
    parser.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument(
        "--verb",
        default="load",
        choices=("load", "load_archive", "inspect", "restore", "save", "cli_inspect", "cli_verify"),
    )
    parser.add_argument("--archive", required=True, help="the archive read, or written by `--verb save`")
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--clock", choices=("wall", "cpu", "thread"), default="wall", help="what a call's time is")
    args = parser.parse_args()
    archive = os.path.abspath(args.archive)
    trees = {"peer": os.path.abspath(args.peer), "this": os.path.abspath(args.tree)}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for i in range(args.pairs):
        for name in trees if i % 2 == 0 else reversed(trees):
            runs[name].append(_run(trees[name], args.verb, archive, args.clock))
    print(f"first zipsave.{args.verb} of {archive} in a fresh interpreter, {args.pairs} pairs, {args.clock} time")
    for name, values in runs.items():
        first = statistics.median(f for f, _ in values)
        extra = statistics.median(f - s for f, s in values)
        print(f"{name:>5} ({trees[name]}): first {first:.2f} ms, first - second {extra:.2f} ms")
    pairs = list(zip(runs["peer"], runs["this"]))
    ratios = [this[0] / peer[0] for peer, this in pairs]
    saved = [peer[0] - this[0] for peer, this in pairs]
    print(
        f"this / peer, first call: {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}); "
        f"peer - this: {statistics.median(saved):.2f} ms"
    )


if __name__ == "__main__":
    main()
