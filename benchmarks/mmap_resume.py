"""Mapped resumes (issue 37): ``zipsave.load(cls=DQN, mmap=True)`` of a DQN with a full replay
buffer, checked and lazy, each in a fresh interpreter, with the archive's pages in the page
cache (``warm``) or dropped from it (``cold``: ``POSIX_FADV_DONTNEED`` on the archive only).

Two or more zipsave trees are compared in the same run (``--trees name=path,...``: each one
goes first on ``PYTHONPATH``), their runs alternated, so a shared machine's noise falls on
both. Rows: the time ``load`` takes to return, its peak resident memory above the baseline
(``VmHWM`` reset through ``clear_refs``) and the resident memory it leaves (``VmRSS`` after
minus before), both as a multiple of the buffer's bytes, and the CPU time of all its threads
(``cpu s``: on a shared machine a steadier measure of the work than the wall clock).

Usage::

    python benchmarks/mmap_resume.py --n 3e4 --reps 5 --trees base=/tmp/base,new=.
    python benchmarks/mmap_resume.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _proc  # noqa: E402 - found through the sys.path entry above

MODES = {"checked": {"mmap": True}, "lazy": {"mmap": True, "verify": False}}


def work(spec: dict) -> dict:
    import _rb_ops
    import stable_baselines3  # noqa: F401 - imports are not what is measured
    import torch._dynamo  # noqa: F401 - optimizer.load_state_dict imports it once per process
    from stable_baselines3 import DQN

    import zipsave
    import zipsave.sb3  # noqa: F401

    path = spec["path"]
    if spec["cache"] == "cold":
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    else:
        _proc.warm(path)
        _proc.warm(path)
    # Everything but the buffer once, untimed: the first load in a process imports and builds
    # what any resume would (the model-only row of replay_buffer.py), not what is compared.
    zipsave.load(path, cls=DQN, device="cpu", exclude=["replay_buffer"])
    out: dict = {}

    def body() -> None:
        out["model"] = zipsave.load(path, cls=DQN, device="cpu", **MODES[spec["mode"]])

    before, cpu = _proc.status("VmRSS"), resource.getrusage(resource.RUSAGE_SELF)
    record = _proc.measure(body)
    after, cpu_after = _proc.status("VmRSS"), resource.getrusage(resource.RUSAGE_SELF)
    record["cpu_s"] = cpu_after.ru_utime + cpu_after.ru_stime - cpu.ru_utime - cpu.ru_stime
    record["left_rss"] = after - before if after is not None and before is not None else None
    arrays = _rb_ops.buffer_arrays(out["model"].replay_buffer)
    record["buffer_bytes"] = sum(a.nbytes for a in arrays)
    record["zipsave"] = os.path.dirname(os.path.dirname(os.path.abspath(zipsave.__file__)))
    return record


def _prepare(path: str, n: int) -> None:
    import _rb_ops
    import numpy as np

    import zipsave

    model = _rb_ops.build(n)
    for _ in _rb_ops.fill_random(model.replay_buffer, np.random.default_rng(0), true_share=0.5):
        pass
    model.replay_buffer.pos, model.replay_buffer.full = 0, True
    zipsave.save(model, path, include=["replay_buffer"])


def _table(records: list[dict]) -> str:
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in records:
        if "error" not in r:
            groups.setdefault((r["cache"], r["mode"], r["tree"]), []).append(r)
    lines = [
        f"{'cache':<6} {'mode':<8} {'tree':<8} {'median s':>9} {'min-max s':>13} {'cpu s':>6} "
        f"{'peak dRSS x':>12} {'left dRSS x':>12}"
    ]
    for (cache, mode, tree), rs in sorted(groups.items()):
        secs = [r["seconds"] for r in rs]
        peak = statistics.median(r["delta_rss"] / r["buffer_bytes"] for r in rs)
        left = statistics.median(r["left_rss"] / r["buffer_bytes"] for r in rs)
        lines.append(
            f"{cache:<6} {mode:<8} {tree:<8} {statistics.median(secs):>9.3f} "
            f"{min(secs):>6.3f}-{max(secs):<6.3f} {statistics.median(r['cpu_s'] for r in rs):>6.3f} "
            f"{peak:>12.3f} {left:>12.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=float, default=3e4, help="transitions (3e4: 1.69 GB)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--trees", default=f"this={os.path.dirname(HERE)}", help="name=path,... of zipsave trees")
    parser.add_argument("--caches", default="warm,cold")
    parser.add_argument("--modes", default="checked,lazy")
    parser.add_argument("--path", default="", help="the archive (made if missing; deleted at the end unless kept)")
    parser.add_argument("--keep", action="store_true", help="keep the archive")
    parser.add_argument("--out", default="", help="write <out>.json and <out>.txt")
    parser.add_argument("--smoke", action="store_true", help="64 transitions, one repetition")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _proc.answer(work, json.loads(args.worker))
        return
    n, reps = (64, 1) if args.smoke else (int(args.n), args.reps)
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    path = args.path or os.path.join(tempfile.mkdtemp(prefix="zipsave-mmap-"), "model.zip")
    if not os.path.exists(path):
        _prepare(path, n)
    records = []
    try:
        for rep in range(reps):
            for cache in args.caches.split(","):
                for mode in args.modes.split(","):
                    order = sorted(trees) if rep % 2 == 0 else sorted(trees, reverse=True)
                    for tree in order:
                        spec = {"path": path, "cache": cache, "mode": mode}
                        rec = _proc.spawn([__file__, "--worker"], spec, 900, [os.path.abspath(trees[tree]), HERE])
                        rec.update(spec, tree=tree, rep=rep)
                        records.append(rec)
                        status = f"{rec['seconds']:.3f} s" if "seconds" in rec else rec.get("error", "?")
                        print(f"rep {rep} {cache} {mode} {tree}: {status}", flush=True)
    finally:
        if not args.keep:
            os.unlink(path)
    table = _table(records)
    print(table)
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump({"records": records, "trees": trees, "n": n}, f, indent=1)
        with open(args.out + ".txt", "w") as f:
            f.write(table + "\n")
    failed = [r for r in records if "error" in r]
    if failed:
        for r in failed:
            print(
                f"FAILED {r['tree']} {r['cache']} {r['mode']}: {r['error']}\n{r.get('traceback', '')}", file=sys.stderr
            )
        sys.exit(1)


if __name__ == "__main__":
    main()
