"""Replay buffers: resume and save a DQN with its buffer, zipsave against SB3's pickle path and
the raw floor, every operation in a fresh interpreter, page cache warm.

The model is a DQN ``CnnPolicy`` on 4 x 84 x 84 uint8 frames; the buffer is full, of random
frames (``observations`` and ``next_observations``: 56 KB a transition, so 1e4 transitions are
0.56 GB, 3e4 the issue's 1.6 GB and 1.07e5 the 6 GB case). Rows, each against its peer in the
same repetition:

* loads: ``raw_readinto_fresh`` (the floor: one ``readinto`` of the buffer's bytes into a
  fresh ``np.empty``), SB3's ``DQN.load`` + ``load_replay_buffer``, ``zipsave.load(cls=DQN)``;
  restores into a live model whose buffer training has filled (resident, other transitions):
  SB3's ``set_parameters`` + ``load_replay_buffer`` and ``zipsave.restore`` (which reads the
  buffer into the live arrays, so ``dRSS x`` near 0 where SB3's is about 1);
* mapped: ``zipsave.load(mmap=True)`` checked, lazy (``verify=False``) and checked plus 64
  sampled batches (resident memory follows what is sampled); ``zipsave_load_model_only``
  (``exclude=["replay_buffer"]``) is the part of every resume that is not the buffer;
* saves: raw ``write`` + ``fsync`` of the buffer's bytes (the floor), SB3's ``save`` +
  ``save_replay_buffer`` (no ``fsync``), ``zipsave.save(include=["replay_buffer"])``, and
  the blocked part of ``save(background=True)`` (a full copy of the buffer);
  ``zipsave_save_background_incremental``: the blocked part of a second
  ``save(background=True, incremental=True)`` after 2% of the buffer was written anew (its
  ``x bg`` column divides it by the full snapshot's row; the first, shadow-filling save's
  blocked time is ``first_s`` in the JSON records).

``dRSS x`` is the peak resident memory above the baseline (``VmHWM`` reset through
``clear_refs``), as a multiple of the buffer's bytes.

Usage::

    python benchmarks/replay_buffer.py                          # 1e4 and 3e4, 3 repetitions
    python benchmarks/replay_buffer.py --sizes 1.07e5 --reps 1  # the 6 GB case
    python benchmarks/replay_buffer.py --smoke                  # a few MB, what CI runs
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _proc  # noqa: E402 - found through the sys.path entry above

PEERS = {  # row -> the rows it is divided by in the same repetition
    "zipsave_load": ("raw_readinto_fresh", "sb3_load"),
    "zipsave_load_noverify": ("raw_readinto_fresh", "sb3_load"),
    "zipsave_restore": ("raw_readinto_fresh", "sb3_restore"),
    "sb3_load": ("raw_readinto_fresh",),
    "sb3_restore": ("raw_readinto_fresh",),
    "zipsave_load_mmap": ("raw_readinto_fresh", "sb3_load"),
    "zipsave_load_model_only": ("raw_readinto_fresh", "sb3_load"),
    "zipsave_load_mmap_lazy": ("raw_readinto_fresh", "sb3_load"),
    "zipsave_load_mmap_sample": ("raw_readinto_fresh", "sb3_load"),
    "zipsave_restore_mmap": ("raw_readinto_fresh", "sb3_restore"),
    "zipsave_save": ("raw_write_fsync", "sb3_save"),
    "zipsave_save_background": ("raw_write_fsync", "sb3_save"),
    "zipsave_save_background_incremental": ("zipsave_save_background", "raw_write_fsync", "sb3_save"),
    "sb3_save": ("raw_write_fsync",),
}


# -- the worker --------------------------------------------------------------------------------
def work(spec: dict) -> dict:
    import _rb_ops
    from _proc import measure, warm

    op = _rb_ops.BY_NAME[spec["op"]]
    import stable_baselines3  # noqa: F401 - both sides need it: imports are not what is measured
    import torch._dynamo  # noqa: F401 - optimizer.load_state_dict imports it once per process (seconds)

    import zipsave.sb3  # noqa: F401

    ctx = _rb_ops.Ctx(n=int(spec["n"]), folder=spec["folder"], out=os.path.join(spec["scratch"], "out.zip"))
    if op.setup is not None:
        op.setup(ctx)
    # At 6 GB the inputs of one size (18 GB) do not all fit in the page cache beside the buffer:
    # the other ops' files are dropped from it, and this op's are read twice, so the kernel
    # keeps them (active list) when the op's own allocations need memory.
    reads = [ctx.path(kind) for kind in op.reads]
    for name in sorted(os.listdir(ctx.folder)):
        if os.path.join(ctx.folder, name) not in reads:
            _evict(os.path.join(ctx.folder, name))
    for path in reads * 2:
        warm(path)
    if op.group == "save":
        os.sync()
    record = measure(lambda: op.body(ctx))
    record.update(ctx.extra.get("record", {}))  # what the op's setup measured besides
    after = _rb_ops.AFTER.get(op.name)
    if after is not None:
        t0 = time.perf_counter()
        after(ctx)
        record["after_s"] = time.perf_counter() - t0
    if spec.get("check") and op.check is not None:
        op.check(ctx)
        record["checked"] = True
    if os.path.exists(ctx.out):
        os.unlink(ctx.out)
    return record


def _evict(path: str) -> None:
    """Drop ``path``'s clean pages from the page cache (``POSIX_FADV_DONTNEED``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


# -- the driver --------------------------------------------------------------------------------
def _run(spec: dict, timeout: float) -> dict:
    return _proc.spawn([__file__, "--worker"], spec, timeout, [os.path.dirname(HERE), HERE])


def _summary(records: list[dict], sizes: dict[float, int]) -> list[dict]:
    rows = []
    for n, nbytes in sizes.items():
        mine = [r for r in records if r["n"] == n and "seconds" in r]
        for name in dict.fromkeys(r["op"] for r in mine):
            times = {r["rep"]: r for r in mine if r["op"] == name}
            row = {
                "n": n,
                "op": name,
                "gb": nbytes / 1e9,
                "seconds": statistics.median(r["seconds"] for r in times.values()),
                "min_s": min(r["seconds"] for r in times.values()),
                "max_s": max(r["seconds"] for r in times.values()),
                "drss_x": statistics.median((r["delta_rss"] or 0) / nbytes for r in times.values()),
            }
            for peer in PEERS.get(name, ()):
                theirs = {r["rep"]: r["seconds"] for r in mine if r["op"] == peer}
                ratios = [times[rep]["seconds"] / theirs[rep] for rep in times if rep in theirs]
                if ratios:
                    row[f"x_{peer}"] = statistics.median(ratios)
            rows.append(row)
    return rows


def _fmt(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else "-"


def _table(rows: list[dict]) -> str:
    head = (
        f"{'n':>8} {'GB':>5} {'operation':<36} {'median s':>9} {'min-max s':>15} {'x floor':>8} {'x SB3':>6} "
        f"{'x bg':>6} {'dRSS x':>7}"
    )
    lines = [head, "-" * len(head)]
    for row in rows:
        floor = row.get("x_raw_readinto_fresh", row.get("x_raw_write_fsync"))
        sb3 = row.get("x_sb3_load", row.get("x_sb3_restore", row.get("x_sb3_save")))
        full_copy = row.get("x_zipsave_save_background")  # an incremental snapshot against a full one
        lines.append(
            f"{row['n']:>8.3g} {row['gb']:>5.2f} {row['op']:<36} {row['seconds']:>9.3f} "
            f"{row['min_s']:>7.3f}-{row['max_s']:<7.3f} {_fmt(floor):>8} {_fmt(sb3):>6} {_fmt(full_copy):>6} "
            f"{row['drss_x']:>7.3f}"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    """Seconds of each operation per size, one panel per group (matplotlib, the bench extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import _rb_ops
    import matplotlib.pyplot as plt

    groups: dict[str, list[dict]] = {"load": [], "save": []}
    for row in rows:
        groups["save" if _rb_ops.BY_NAME[row["op"]].group == "save" else "load"].append(row)
    groups = {group: mine for group, mine in groups.items() if mine}
    fig, axes = plt.subplots(1, len(groups), figsize=(5.5 * len(groups), 4.5), squeeze=False)
    axes = axes[0]
    for ax, (group, mine) in zip(axes, groups.items()):
        sizes = sorted({r["n"] for r in mine})
        names = list(dict.fromkeys(r["op"] for r in mine))
        width = 0.8 / max(len(sizes), 1)
        for k, n in enumerate(sizes):
            secs = {r["op"]: r["seconds"] for r in mine if r["n"] == n}
            gb = next(r["gb"] for r in mine if r["n"] == n)
            ax.barh(
                [i + k * width for i in range(len(names))],
                [secs.get(name, 0) for name in names],
                height=width,
                label=f"{n:.0e} transitions ({gb:.2f} GB)",
            )
        ax.set_yticks([i + width * (len(sizes) - 1) / 2 for i in range(len(names))], names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("seconds (median, fresh process, page cache warm)")
        ax.set_title(f"replay buffer {group}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1e4,3e4", help="transitions, comma-separated")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    parser.add_argument("--folder", default="", help="where input files are kept between runs")
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="where replay_buffer.json/.txt go")
    parser.add_argument("--smoke", action="store_true", help="64 transitions, one repetition, checked")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _proc.answer(work, json.loads(args.worker))
        return
    import _rb_ops

    sizes = [64.0] if args.smoke else [float(s) for s in args.sizes.split(",")]
    reps = 1 if args.smoke else args.reps
    names = [o.name for o in _rb_ops.OPS] if not args.ops else [s.strip() for s in args.ops.split(",")]
    base = args.folder or tempfile.mkdtemp(prefix="zipsave-rb-")
    scratch = tempfile.mkdtemp(prefix="zipsave-rb-out-", dir=base)
    records, nbytes = [], {}
    try:
        for n in sizes:
            folder = os.path.join(base, f"n{int(n)}")
            _rb_ops.prepare(folder, int(n))
            nbytes[n] = os.path.getsize(os.path.join(folder, _rb_ops.FILES["raw"]))
            for rep in range(reps):
                order = names[:]
                random.Random(rep).shuffle(order)
                for name in order:
                    spec = {
                        "op": name,
                        "n": n,
                        "folder": folder,
                        "scratch": scratch,
                        "rep": rep,
                        "check": args.smoke or rep == 0,
                    }
                    rec = _run(spec, args.timeout)
                    rec.update(op=name, n=n, rep=rep)
                    records.append(rec)
                    status = f"{rec['seconds']:.3f} s" if "seconds" in rec else rec.get("error", "?")
                    print(f"n={n:.3g} rep {rep} {name}: {status}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not args.folder:
            shutil.rmtree(base, ignore_errors=True)
    rows = _summary(records, nbytes)
    table = _table(rows)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    stem = "replay_buffer-smoke" if args.smoke else "replay_buffer"
    with open(os.path.join(args.out, stem + ".json"), "w") as f:
        json.dump({"records": records, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, stem + ".txt"), "w") as f:
        f.write(table + "\n")
    if not args.smoke:
        try:
            plot(rows, os.path.join(args.out, stem + ".png"))
        except ImportError:
            print("matplotlib is not installed (the bench extra): no plot", file=sys.stderr)
    failed = [r for r in records if "error" in r]
    if failed:
        for r in failed:
            print(f"FAILED {r['op']} n={r['n']}: {r['error']}\n{r.get('traceback', '')}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
