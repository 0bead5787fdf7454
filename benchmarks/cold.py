"""Cold starts (issue 37): the first call of each verb in a fresh interpreter, and a copying load
in three memory states, with every peer in the same run.

Run from the repository root (``python benchmarks/run.py --cold`` runs the same)::

    python benchmarks/cold.py --n 1e7 --reps 5 --out benchmarks/results/cold-1e7

Each (op, state, repetition) is one fresh interpreter (``_cold_worker.py``) that imports torch,
sets up its state, and times the op's first call (zipsave's imports included: nothing of
zipsave is imported before it) and then the same call again. Repetitions run the ops in a
shuffled order; ratios are taken per repetition between ops of the same repetition, then the
median is reported. Bytecode caches are written first (``compileall``), as a wheel install
writes them. Writes ``cold.json`` and ``cold.txt`` into ``--out``.

Rows:

- ``first - second``: what the first call costs more than the second, per verb (the goal is
  at most 10 ms).
- first calls against their peers: ``zipsave.load`` / ``torch.load``, ``zipsave.restore`` /
  raw ``readinto`` into the live tensors, ``zipsave.save`` (durable) / ``torch.save`` + fsync
  and / raw write + fsync.
- memory states of a copying load (``zipsave.load`` against ``torch.load``): ``quiet`` (a
  fresh process), ``freed`` (a model of the same size was just freed), ``loop`` (the median of
  loads 2-5 of five in a row, each result freed).

``--peer DIR`` also runs every zipsave op with the zipsave of another checkout (``git worktree
add /tmp/peer main``) in the same repetitions, shuffled with the rest, and adds the ratios
``this checkout / peer`` per op: a before/after comparison under the same machine load.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

#: ``(op, state)`` pairs measured in each repetition.
CASES = [
    ("zipsave_load", "quiet"),
    ("torch_load", "quiet"),
    ("zipsave_load", "freed"),
    ("torch_load", "freed"),
    ("zipsave_load", "loop"),
    ("torch_load", "loop"),
    ("zipsave_load_archive", "quiet"),
    ("zipsave_inspect", "quiet"),
    ("zipsave_restore", "quiet"),
    ("raw_readinto", "quiet"),
    ("zipsave_save", "quiet"),
    ("torch_save_fsync", "quiet"),
    ("raw_write_fsync", "quiet"),
]
#: ``(label, numerator, denominator, figure)``: figure ``first`` or ``loop`` (median of loads 2-5).
RATIOS = [
    (
        "first load, quiet process: zipsave.load / torch.load",
        ("zipsave_load", "quiet"),
        ("torch_load", "quiet"),
        "first",
    ),
    (
        "first load after a same-size model was freed / torch.load",
        ("zipsave_load", "freed"),
        ("torch_load", "freed"),
        "first",
    ),
    ("loads 2-5 of a loop / torch.load's", ("zipsave_load", "loop"), ("torch_load", "loop"), "loop"),
    (
        "first restore / raw readinto into the live tensors",
        ("zipsave_restore", "quiet"),
        ("raw_readinto", "quiet"),
        "first",
    ),
    ("first durable save / torch.save + fsync", ("zipsave_save", "quiet"), ("torch_save_fsync", "quiet"), "first"),
    ("first durable save / raw write + fsync", ("zipsave_save", "quiet"), ("raw_write_fsync", "quiet"), "first"),
]


def _env(root: str = ROOT) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root, HERE, *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _figure(record: dict, figure: str) -> float:
    return statistics.median(record["loop"]) if figure == "loop" else record[figure]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=float, default=1e7, help="parameters of the model (default 1e7)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "cold-1e7"), help="output folder")
    parser.add_argument(
        "--cases", default=None, help="comma-separated op:state pairs to run (default all; ratios need both sides)"
    )
    parser.add_argument("--work", default=None, help="folder for the input files (default: a temporary folder)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--peer", default=None, help="another checkout whose zipsave runs the zipsave ops in the same repetitions"
    )
    args = parser.parse_args(argv)

    roots = {"this": ROOT, **({"peer": os.path.abspath(args.peer)} if args.peer else {})}
    for root in roots.values():
        compileall.compile_dir(os.path.join(root, "zipsave"), quiet=1)  # as a wheel install writes them
    os.makedirs(args.out, exist_ok=True)
    folder = args.work or tempfile.mkdtemp(prefix="zipsave-cold-")
    env = _env()
    subprocess.run(
        [sys.executable, os.path.join(HERE, "_cold_worker.py"), "prepare", "-", folder, str(args.n)],
        env=env,
        check=True,
    )
    rng = random.Random(args.seed)
    records: list[dict] = []
    started = time.perf_counter()
    cases = CASES if not args.cases else [tuple(c.split(":")) for c in args.cases.split(",")]
    envs = {tree: _env(root) for tree, root in roots.items()}
    for rep in range(args.reps):
        order = [("this", op, state) for op, state in cases]
        order += [("peer", op, state) for op, state in cases if args.peer and op.startswith("zipsave")]
        rng.shuffle(order)
        for tree, op, state in order:
            out = subprocess.run(
                [sys.executable, os.path.join(HERE, "_cold_worker.py"), op, state, folder, str(args.n)],
                env=envs[tree],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if out.returncode != 0:
                print(f"FAILED {op} {state} rep {rep} ({tree}):\n{out.stderr}", file=sys.stderr)
                return 1
            record = {
                "tree": tree,
                "op": op,
                "state": state,
                "rep": rep,
                "loadavg": os.getloadavg()[0],
                **json.loads(out.stdout.splitlines()[-1]),
            }
            records.append(record)
            print(
                f"  {'peer ' if tree == 'peer' else ''}{op:22s} {state:6s} rep {rep}: first {record['first'] * 1e3:8.1f} ms, "
                f"second {record['second'] * 1e3:8.1f} ms",
                flush=True,
            )
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    if not args.work:
        os.rmdir(folder)

    peer = {(r["op"], r["state"], r["rep"]): r for r in records if r["tree"] == "peer"}
    by = {(r["op"], r["state"], r["rep"]): r for r in records if r["tree"] == "this"}
    summary: dict = {"first_minus_second_ms": {}, "first_ms": {}, "ratios": {}, "modules": {}, "vmstat": {}}
    for op, state in cases:
        rows = [by[(op, state, rep)] for rep in range(args.reps)]
        key = f"{op} ({state})"
        summary["first_ms"][key] = round(statistics.median(r["first"] for r in rows) * 1e3, 1)
        summary["first_minus_second_ms"][key] = round(
            statistics.median(r["first"] - r["second"] for r in rows) * 1e3, 1
        )
        summary["modules"][key] = statistics.median(r["modules"] for r in rows)
        summary["vmstat"][key] = {
            k: statistics.median(r.get("vmstat", {}).get(k, 0) for r in rows)
            for k in ("thp_fault_alloc", "compact_stall", "pgfault")
        }
        if state == "loop":
            summary["first_ms"][key + " loads 2-5"] = round(
                statistics.median(_figure(r, "loop") for r in rows) * 1e3, 1
            )
    for label, num, den, figure in RATIOS:
        if num not in cases or den not in cases:
            continue
        pairs = [_figure(by[(*num, rep)], figure) / _figure(by[(*den, rep)], figure) for rep in range(args.reps)]
        summary["ratios"][label] = {
            "median": round(statistics.median(pairs), 2),
            "min": round(min(pairs), 2),
            "max": round(max(pairs), 2),
        }
    if peer:
        summary["peer_first_ms"], summary["vs_peer"] = {}, {}
        for op, state in cases:
            if (op, state, 0) not in peer:
                continue
            figure = "loop" if state == "loop" else "first"
            key = f"{op} ({state})" + (" loads 2-5" if figure == "loop" else "")
            summary["peer_first_ms"][key] = round(
                statistics.median(_figure(peer[(op, state, rep)], figure) for rep in range(args.reps)) * 1e3, 1
            )
            pairs = [
                _figure(by[(op, state, rep)], figure) / _figure(peer[(op, state, rep)], figure)
                for rep in range(args.reps)
            ]
            summary["vs_peer"][key] = {
                "median": round(statistics.median(pairs), 2),
                "min": round(min(pairs), 2),
                "max": round(max(pairs), 2),
            }
    loads = sorted(r["loadavg"] for r in records)
    machine = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "n": args.n,
        "reps": args.reps,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "loadavg_median": loads[len(loads) // 2],
        "thp": _read("/sys/kernel/mm/transparent_hugepage/enabled"),
        "thp_defrag": _read("/sys/kernel/mm/transparent_hugepage/defrag"),
        "peer": args.peer,
    }
    with open(os.path.join(args.out, "cold.json"), "w") as f:
        json.dump({"machine": machine, "summary": summary, "records": records}, f, indent=1)
    text = _render(machine, summary)
    with open(os.path.join(args.out, "cold.txt"), "w") as f:
        f.write(text)
    print(text)
    return 0


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _render(machine: dict, summary: dict) -> str:
    lines = [
        f"cold starts, {machine['n']:.0e} params, {machine['reps']} reps, load average median "
        f"{machine['loadavg_median']:.1f}, THP {machine['thp']} / defrag {machine['thp_defrag']}",
        "",
    ]
    lines.append(f"{'first call (state)':40s} {'first ms':>9s} {'first-second ms':>16s} {'modules':>8s}")
    for key, first in summary["first_ms"].items():
        extra = summary["first_minus_second_ms"].get(key)
        modules = summary["modules"].get(key)
        lines.append(
            f"{key:40s} {first:9.1f} {'' if extra is None else f'{extra:16.1f}'}"
            f"{'' if modules is None else f'{modules:9.0f}'}"
        )
    lines += ["", f"{'ratio (median of per-repetition ratios)':72s} {'median':>7s} {'min':>6s} {'max':>6s}"]
    for label, r in summary["ratios"].items():
        lines.append(f"{label:72s} {r['median']:7.2f} {r['min']:6.2f} {r['max']:6.2f}")
    if summary.get("vs_peer"):
        lines += [
            "",
            f"peer: {machine['peer']}",
            f"{'this checkout / peer, per repetition':50s} {'peer ms':>9s} {'median':>7s} {'min':>6s} {'max':>6s}",
        ]
        for key, r in summary["vs_peer"].items():
            lines.append(
                f"{key:50s} {summary['peer_first_ms'][key]:9.1f} {r['median']:7.2f} {r['min']:6.2f} {r['max']:6.2f}"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
