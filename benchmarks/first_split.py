"""Where a first call's time over its second goes, in fresh interpreters after ``import torch``:
importing the zipsave modules the call uses (found by a probe process, imported in the order the
call imported them), the first call with those modules imported, and the second call. Trees
alternate process by process (``--peer``), so a shared VM's load falls on both alike. CPU time
of the calling thread (``time.thread_time``: torch's idle intra-op threads, spinning after an
operation, do not count), milliseconds; prints medians, minima and maxima.

Usage::

    git worktree add --detach /tmp/peer main
    python benchmarks/first_split.py --peer /tmp/peer --verb load --archive model.zip --runs 15
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# The model a restore fills (the same shapes as `first_pairs.py --verb save` builds).
_SETUP = r"""
import importlib, json, sys, time
import torch
verb, archive = sys.argv[1], sys.argv[2]
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 12))
optimizer = torch.optim.Adam(model.parameters())
model(torch.ones(1, 64)).sum().backward()
optimizer.step()
def call():
    import zipsave
    if verb == "restore":
        zipsave.restore({"model": model, "optimizer": optimizer}, archive)
    elif verb == "save":
        zipsave.save({"model": model, "optimizer": optimizer, "step": 3}, archive)
    else:
        getattr(zipsave, verb)(archive)
"""

_PROBE = (
    _SETUP
    + r"""
before = list(sys.modules)
call()
print(json.dumps([m for m in sys.modules if m not in set(before) and m.startswith("zipsave")]))
"""
)

_TIMED = (
    _SETUP
    + r"""
modules = json.loads(sys.argv[3])
t0 = time.thread_time()
for name in modules:
    importlib.import_module(name)
t1 = time.thread_time()
call()
t2 = time.thread_time()
call()
t3 = time.thread_time()
print(json.dumps([(t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3]))
"""
)


def _python(tree: str, script: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, "-c", script, *args], env=env, cwd="/", capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr)
    return out.stdout.splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer", help="another zipsave tree, alternated with this one")
    parser.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--verb", default="load", choices=("load", "load_archive", "restore", "inspect", "save"))
    parser.add_argument("--archive", required=True, help="the archive read, or written by `--verb save`")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    trees = [args.tree] + ([args.peer] if args.peer else [])
    modules = {tree: _python(tree, _PROBE, args.verb, args.archive) for tree in trees}
    rows: dict[str, list[list[float]]] = {tree: [] for tree in trees}
    for _ in range(args.runs):
        for tree in trees:
            rows[tree].append(json.loads(_python(tree, _TIMED, args.verb, args.archive, modules[tree])))
    print(
        f"first zipsave.{args.verb} of {args.archive} after import torch, {args.runs} fresh processes per tree, CPU ms"
    )
    for tree in trees:
        print(f"{tree}: {len(json.loads(modules[tree]))} zipsave modules")
        for i, what in enumerate(("imports", "first call (modules imported)", "second call")):
            values = [r[i] for r in rows[tree]]
            print(f"  {what}: median {statistics.median(values):.2f} min {min(values):.2f} max {max(values):.2f}")
        over = [r[0] + r[1] - r[2] for r in rows[tree]]
        print(f"  first - second (imports included): median {statistics.median(over):.2f}")


if __name__ == "__main__":
    main()
