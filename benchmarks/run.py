"""zipsave benchmark suite: save / load / restore against SB3, torch, safetensors and the raw floor.

Run from the repository root::

    python benchmarks/run.py                      # 1e4,1e6,1e7,1e8 params, prefault+asis
    python benchmarks/run.py --sizes 1e6,1e7 --reps 3 --regime prefault --out /tmp/bench
    python benchmarks/run.py --smoke --out /tmp/bench-smoke   # CI: tiny sizes, 1 rep, < 60 s

Every (operation, size, regime, repetition) runs in a fresh interpreter. Within one
repetition all operations of a size run back to back in a shuffled order, and ratios are
taken per repetition against the raw floor and the peers measured in it, then the median is
reported. The first-load rows (``*_first``, ``_ops_first.py``) are the first call of their
interpreter, ``import zipsave`` (or SB3) included, against ``torch.load``'s first call (or
SB3's ``PPO.load``) in an equally fresh one; they list the integrations they imported.
``--cold`` runs ``cold.py`` instead: each verb's first and second call in fresh processes and a
copying load in three memory states, with their peers (issue 37). Writes ``results.json``, ``table.txt``, ``tables.rst`` and ``bench.png`` into
``--out``. Exits non-zero only when an operation fails (never because of timing).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import _catalog
import _ops
import _proc
import _report

DEFAULT_SIZES = "1e4,1e6,1e7,1e8"
SMOKE_SIZES = "1e3,1e4"


def _parse_sizes(text: str) -> list[float]:
    return [float(s) for s in text.split(",") if s.strip()]


def _machine() -> dict:
    info: dict = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),  # noqa: UP017 - 3.10
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    for mod in ("torch", "numpy", "safetensors", "stable_baselines3"):
        try:
            info[mod] = __import__(mod).__version__
        except ImportError:
            info[mod] = None
    try:
        info["git"] = (
            subprocess.run(
                ["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
            ).stdout.strip()
            or None
        )
    except OSError:
        info["git"] = None
    return info


def _worker(spec: dict, timeout: float) -> dict:
    return _proc.spawn([os.path.join(HERE, "_worker.py")], spec, timeout, [ROOT, HERE])


def _reps_for(n: float, reps: int | None) -> int:
    if reps is not None:
        return reps
    return 5 if 5e6 <= n < 5e7 else 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=None, help=f"parameter counts, comma separated (default {DEFAULT_SIZES})")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per size (default 3; 5 at 1e7)")
    parser.add_argument("--regime", default="prefault,asis", help="prefault, asis, or both (default both)")
    parser.add_argument("--ops", default=None, help="comma-separated op names (default all); see --list")
    parser.add_argument(
        "--out", default=os.path.join(HERE, "results"), help="output folder (default benchmarks/results)"
    )
    parser.add_argument("--work", default=None, help="folder for input files (default OUT/tmp)")
    parser.add_argument("--check", action="store_true", help="verify every op's result against the saved model")
    parser.add_argument(
        "--asis-wait",
        type=float,
        default=3.0,
        help="seconds 'asis' waits so freed memory goes back to the host (default 3)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="workers in parallel (timings are only meaningful with 1)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per worker before it counts as failed")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the records of OUT/results.json; ops measured again replace theirs, and "
        "ratios only pair ops of the same run",
    )
    parser.add_argument("--keep-inputs", action="store_true", help="keep the input files afterwards")
    parser.add_argument("--seed", type=int, default=0, help="seed of the op order shuffle")
    parser.add_argument(
        "--no-warmup", action="store_true", help="measure each op's first call in the process (lazy imports included)"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"CI mode: sizes {SMOKE_SIZES}, 1 rep, prefault, --check, all ops of a size in one "
        "process (the first-load rows each in their own)",
    )
    parser.add_argument("--list", action="store_true", help="list the operations and exit")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="the cold-start rows of cold.py instead (issue 37): first and second calls in fresh "
        "processes, a copying load in three memory states; one size (default 1e7), "
        "--reps (default 5), --out (default benchmarks/results/cold-1e7)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="cuda: the CUDA rows (cuda_*) against the host-to-device floor (needs a GPU)",
    )
    args = parser.parse_args(argv)

    if args.cold:
        import cold

        n = _parse_sizes(args.sizes or "1e7")[0]
        out = args.out if args.out != os.path.join(HERE, "results") else os.path.join(HERE, "results", "cold-1e7")
        return cold.main(["--n", str(n), "--reps", str(args.reps or 5), "--out", out, "--seed", str(args.seed)])
    if args.list:
        for op in _catalog.OPS:
            print(f"{op.name:28s} {op.group:5s} {op.label}")
        return 0
    if args.smoke:
        args.sizes = args.sizes or SMOKE_SIZES
        args.reps = args.reps or 1
        args.regime = "prefault"
        args.check = True
        args.no_warmup = True
        args.jobs = max(args.jobs, 2)  # timings of a smoke run mean nothing; finish fast
    sizes = _parse_sizes(args.sizes or DEFAULT_SIZES)
    regimes = [r.strip() for r in args.regime.split(",") if r.strip()]
    for regime in regimes:
        if regime not in ("prefault", "asis"):
            parser.error(f"unknown regime {regime!r}; expected prefault or asis")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("benchmarks/run.py --device cuda: CUDA is not available on this machine.", file=sys.stderr)
            return 2
    wanted = (
        (lambda o: o.name.startswith("cuda_") or o.name == "raw_readinto")
        if args.device == "cuda"
        else (lambda o: not o.name.startswith("cuda_"))
    )
    names = [o.name for o in _catalog.OPS if wanted(o)] if not args.ops else [s.strip() for s in args.ops.split(",")]
    for name in names:
        if name not in _catalog.BY_NAME:
            parser.error(f"unknown op {name!r}; see --list")
    for group, floor in _report.FLOOR.items():  # ratios need the floor in the same repetition
        if any(_catalog.BY_NAME[n].group == group for n in names) and floor not in names:
            names.append(floor)

    os.makedirs(args.out, exist_ok=True)
    work = args.work or os.path.join(args.out, "tmp")
    os.makedirs(work, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="scratch-", dir=work)
    results_path = os.path.join(args.out, "results.json")
    records: list[dict] = []
    history: list[dict] = []
    if args.merge and os.path.exists(results_path):
        with open(results_path) as f:
            old = json.load(f)
        history = old.get("runs") or [{"machine": old.get("machine"), "config": old.get("config")}]
        first = (history[0].get("config") or {}).get("run", "0")
        records = [r if "run" in r else r | {"run": first} for r in old.get("records", [])]
    run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")  # noqa: UP017 - 3.10
    config = {
        "run": run_id,
        "sizes": sizes,
        "regimes": regimes,
        "ops": names,
        "check": args.check,
        "asis_wait": args.asis_wait,
        "jobs": args.jobs,
        "smoke": args.smoke,
        "reps": {_report.size_label(n): _reps_for(n, args.reps) for n in sizes},
    }
    machine = _machine()
    failures = 0
    rng = random.Random(args.seed)
    started = time.perf_counter()
    try:
        warm_folder = None
        if not args.no_warmup:
            warm_folder = os.path.join(work, "warm")
            prepared = _worker({"prepare": True, "n": _ops.WARM_N, "folder": warm_folder}, args.timeout)
            if "error" in prepared:
                print(
                    f"prepare warm-up inputs failed: {prepared['error']}\n{prepared.get('traceback', '')}",
                    file=sys.stderr,
                )
                return 1
        deferred: list[dict] = []
        fresh: list[dict] = []  # --smoke: the first-load rows, each in its worker once the batch wrote the inputs
        for n in sizes:
            folder = os.path.join(work, _report.size_label(n))
            t0 = time.perf_counter()
            if not args.smoke:  # a smoke run writes its inputs in its single worker
                prepared = _worker({"prepare": True, "n": n, "folder": folder, "ops": names}, args.timeout)
                if "error" in prepared:
                    print(f"prepare {_report.size_label(n)} failed: {prepared['error']}", file=sys.stderr)
                    print(prepared.get("traceback", ""), file=sys.stderr)
                    failures += 1
                    continue
                print(
                    f"== {_report.size_label(n)} params: inputs {prepared['prepared']} "
                    f"({time.perf_counter() - t0:.1f} s)",
                    flush=True,
                )
            specs = []
            for rep in range(_reps_for(n, args.reps)):
                for regime in regimes:
                    order = list(names)
                    rng.shuffle(order)
                    common = {
                        "run": run_id,
                        "n": n,
                        "regime": regime,
                        "rep": rep,
                        "folder": folder,
                        "scratch": scratch,
                        "check": args.check,
                        "asis_wait": args.asis_wait,
                        "warm_folder": warm_folder,
                    }
                    if args.smoke:  # a fresh op is the first call of its interpreter: never in the batch
                        batch = [op for op in order if not _catalog.BY_NAME[op].fresh]
                        specs.append(common | {"op": "(all)", "batch": True, "ops": batch, "inputs": names})
                        if (
                            n == sizes[0]
                        ):  # each is a fresh interpreter importing SB3 or zipsave: the smallest size only
                            fresh += [common | {"op": op} for op in order if _catalog.BY_NAME[op].fresh]
                    else:
                        specs += [common | {"op": op} for op in order]
            if args.smoke:  # one worker per size, all at once
                deferred += specs
                continue
            failures += _run_specs(specs, records, args)
            if not args.keep_inputs:
                shutil.rmtree(folder, ignore_errors=True)
        if deferred:
            failures += _run_specs(deferred, records, args)
            failures += _run_specs(fresh, records, args)
            if not args.keep_inputs:
                for spec in deferred:
                    shutil.rmtree(spec["folder"], ignore_errors=True)
        if warm_folder and not args.keep_inputs:
            shutil.rmtree(warm_folder, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not args.keep_inputs and not os.listdir(work):
            os.rmdir(work)

    summary = _report.summarize(records)
    machine["elapsed_s"] = round(time.perf_counter() - started, 1)
    loads = [r["loadavg"] for r in records if r.get("loadavg") is not None and r.get("run") == run_id]
    machine["loadavg_median"] = round(sorted(loads)[len(loads) // 2], 2) if loads else None
    machine["loadavg_max"] = round(max(loads), 2) if loads else None
    with open(results_path, "w") as f:
        runs = [*history, {"machine": machine, "config": config}]
        json.dump(
            {"machine": machine, "config": config, "runs": runs, "summary": summary, "records": records}, f, indent=1
        )
    text = _report.render_text(summary)
    with open(os.path.join(args.out, "table.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "tables.rst"), "w") as f:
        f.write(_report.render_rst(summary))
    print(text)
    try:
        _report.plot(summary, records, os.path.join(args.out, "bench.png"))
        _report.plot_floors(summary, os.path.join(args.out, "floors.png"))
    except ImportError as err:
        print(f"no plot ({err})", file=sys.stderr)
    print(
        f"wrote {results_path} ({machine['elapsed_s']} s, load average median {machine['loadavg_median']}, "
        f"max {machine['loadavg_max']})"
    )
    if failures:
        print(f"{failures} operation(s) failed", file=sys.stderr)
        return 1
    return 0


def _run_specs(specs: list[dict], records: list[dict], args: argparse.Namespace) -> int:
    failures = 0

    def finish(spec: dict, result: dict, load: float) -> None:
        nonlocal failures
        if "batch" in result:
            for name, sub in result["batch"].items():
                finish(spec | {"op": name}, sub, load)
            return
        record = {k: spec[k] for k in ("op", "n", "regime", "rep", "run")} | result | {"loadavg": load}
        record.pop("traceback", None)
        records.append(record)
        where = f"{spec['op']} {_report.size_label(spec['n'])} {spec['regime']} rep {spec['rep']}"
        if "error" in result:
            failures += 1
            print(f"FAILED {where}: {result['error']}\n{result.get('traceback', '')}", file=sys.stderr, flush=True)
        elif "skipped" in result:
            print(f"skipped {where}: {result['skipped']}", flush=True)
        else:
            print(f"  {where}: {result['seconds'] * 1e3:9.2f} ms", flush=True)

    if args.jobs <= 1:
        for spec in specs:
            load = os.getloadavg()[0]
            finish(spec, _worker(spec, args.timeout), load)
        return failures
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [(spec, os.getloadavg()[0], pool.submit(_worker, spec, args.timeout)) for spec in specs]
        for spec, load, fut in futures:
            finish(spec, fut.result(), load)
    return failures


if __name__ == "__main__":
    sys.exit(main())
