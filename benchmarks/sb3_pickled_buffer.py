"""A replay buffer SB3 pickled (``save_replay_buffer`` without zipsave), read back with
``model.load_replay_buffer(path)``: SB3 alone against the same call under
``zipsave.sb3.install()``, each in a fresh interpreter, side by side in every repetition.

The model is the replay-buffer benchmark's DQN on 4 x 84 x 84 uint8 frames (``_rb_ops.py``),
its buffer full of random frames: 5 000 transitions are the 282 MiB of issue 36. ``dRSS`` is
the peak resident memory above the baseline during the call (``VmHWM`` reset through
``clear_refs``, ``_proc.measure``); the model's own fresh buffer is ``np.zeros``, untouched,
so it adds nothing. The target: zipsave's peak at most 1.1x SB3's.

Usage::

    python benchmarks/sb3_pickled_buffer.py                 # 5 000 transitions, 3 repetitions
    python benchmarks/sb3_pickled_buffer.py --n 1000 --reps 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _proc  # noqa: E402

OPS = ("sb3", "zipsave")


def prepare(folder: str, n: int) -> str:
    """SB3's own pickle of a full buffer of ``n`` random transitions (written once)."""
    import _rb_ops
    import numpy as np

    path = os.path.join(folder, f"buffer-{n}.pkl")
    if not os.path.exists(path):
        model = _rb_ops.build(n)
        rng = np.random.default_rng(0)
        for arr in _rb_ops.buffer_arrays(model.replay_buffer):
            flat = arr.reshape(-1)
            if arr.dtype == np.uint8:
                flat[:] = np.frombuffer(rng.bytes(flat.size), np.uint8)
            else:
                flat[:] = rng.random(flat.size)
        model.replay_buffer.pos, model.replay_buffer.full = 0, True
        model.save_replay_buffer(path)  # SB3's pickle: zipsave is not installed here
    return path


def work(spec: dict) -> dict:
    """The worker: build the model, warm the file, time ``load_replay_buffer``."""
    import _rb_ops

    if spec["op"] == "zipsave":
        import zipsave.sb3

        zipsave.sb3.install()
    model = _rb_ops.build(spec["n"])
    _proc.warm(spec["path"])
    out = _proc.measure(lambda: model.load_replay_buffer(spec["path"]))
    buffer = model.replay_buffer
    out["checksum"] = int(buffer.observations[:, 0, 0, 0, :8].astype("int64").sum())  # the same data both ways
    out["buffer_bytes"] = int(sum(a.nbytes for a in _rb_ops.buffer_arrays(buffer)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--folder", default=None, help="where the pickle is written (a temporary folder by default)")
    parser.add_argument("--json", default=None, help="also write the records here")
    args = parser.parse_args()
    n = int(args.n)
    folder = args.folder or tempfile.mkdtemp(prefix="zipsave-pickled-buffer-")
    os.makedirs(folder, exist_ok=True)
    path = prepare(folder, n)
    repo = os.path.dirname(HERE)
    records = []
    for rep in range(args.reps):
        for op in OPS if rep % 2 == 0 else OPS[::-1]:
            spec = {"op": op, "n": n, "path": path}
            result = _proc.spawn([os.path.abspath(__file__), "--worker"], spec, timeout=900, paths=[HERE, repo])
            result.update(op=op, rep=rep)
            records.append(result)
            if "error" in result:
                print(f"{op}: {result['error']}", file=sys.stderr)
    size = os.path.getsize(path)
    print(f"pickle {size / 2**20:.0f} MiB, {n} transitions, {args.reps} repetitions (median)")
    medians = {}
    for op in OPS:
        rows = [r for r in records if r["op"] == op and "error" not in r]
        if not rows:
            continue
        medians[op] = statistics.median(r["delta_rss"] for r in rows)
        seconds = statistics.median(r["seconds"] for r in rows)
        print(f"{op:8s} dRSS {medians[op] / 2**20:7.0f} MiB = {medians[op] / size:.2f}x the pickle   {seconds:6.2f} s")
    ratios = [
        z["delta_rss"] / s["delta_rss"]
        for s in records
        for z in records
        if s["op"] == "sb3" and z["op"] == "zipsave" and s["rep"] == z["rep"] and "error" not in s | z
    ]
    if ratios:
        print(f"zipsave / SB3 peak, same repetition: median {statistics.median(ratios):.2f}x (max {max(ratios):.2f}x)")
    sums = {r["checksum"] for r in records if "checksum" in r}
    print("same data both ways" if len(sums) == 1 else f"DIFFERENT data: {sums}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        _proc.answer(work, json.loads(sys.argv[2]))
    else:
        main()
