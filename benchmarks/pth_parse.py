"""The ``data.pkl`` of each ``.pth`` member, parsed by zipsave's bounded pure-Python unpickler
(``zipsave._tensors._pth_meta.parse_pickle``): what every load pays per tensor member before it
reads a byte of tensor data. Two or more zipsave trees (``--trees name=path,...``, each first on
``sys.path`` in its own fresh interpreter) are timed in alternation, so a shared machine's
noise falls on all of them; a figure is the median of ``--loops`` parses of the model's
pickles (after a warm-up) in one process, and a ratio the median of per-pair ratios.

Usage::

    python benchmarks/pth_parse.py --trees old=/tmp/peer,new=. --n 1e6 --pairs 10
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _pickles(n: float, folder: str) -> list[str]:
    """The ``data.pkl`` of the model's and the optimizer's ``torch.save`` files, written to ``folder``."""
    import torch

    sys.path.insert(0, HERE)
    import _ops

    policy, optimizer = _ops.build_model(n, _ops.SEED_SAVED)
    paths = []
    for name, state in (("policy", policy.state_dict()), ("optimizer", optimizer.state_dict())):
        buf = io.BytesIO()
        torch.save(state, buf)
        with zipfile.ZipFile(buf) as zf:
            data = zf.read(next(m for m in zf.namelist() if m.endswith("/data.pkl")))
        paths.append(os.path.join(folder, f"{name}.pkl"))
        with open(paths[-1], "wb") as f:
            f.write(data)
    return paths


def _worker(tree: str, loops: int, paths: list[str]) -> None:
    sys.path.insert(0, tree)
    from zipsave._tensors._pth_meta import parse_pickle

    pickles = []
    for path in paths:
        with open(path, "rb") as f:
            pickles.append(f.read())
    for _ in range(20):
        for p in pickles:
            parse_pickle(p)
    times = []
    for _ in range(loops):
        t0 = time.perf_counter()
        for p in pickles:
            parse_pickle(p)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"median_us": statistics.median(times) * 1e6}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", required=True, help="name=path,... (the first is the reference)")
    parser.add_argument("--n", type=float, default=1e6)
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--loops", type=int, default=200)
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return _worker(args.worker[0], args.loops, args.worker[1:])
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    results: dict[str, list[float]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as folder:
        paths = _pickles(args.n, folder)
        for i in range(args.pairs):
            order = list(trees.items()) if i % 2 == 0 else list(reversed(trees.items()))
            for name, tree in order:
                cmd = [sys.executable, __file__, "--trees", args.trees, "--loops", str(args.loops)]
                out = subprocess.run(
                    [*cmd, "--worker", os.path.abspath(tree), *paths], capture_output=True, text=True, check=True
                )
                results[name].append(json.loads(out.stdout.splitlines()[-1])["median_us"])
    first = next(iter(trees))
    print(
        f"parse of the data.pkl of a {args.n:g}-parameter model + Adam (2 pickles), {args.pairs} pairs of fresh processes"
    )
    for name, values in results.items():
        ratios = [v / r for v, r in zip(values, results[first])]
        print(
            f"{name:>8}: median {statistics.median(values):.0f} us ({min(values):.0f}-{max(values):.0f}),"
            f" / {first}: {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
        )


if __name__ == "__main__":
    main()
