"""State dicts given as app-state values (the torch idiom): archive size and warm load time of
``zipsave.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 5})``
against the same model saved as objects (``{"model": model, "optimizer": optimizer}``) and
against ``torch.save``/``torch.load(weights_only=True)`` of the same dict, at about 1e4 and 1e6
parameters with Adam's state (one step taken).

Run from the repository root. ``--old DIR`` also writes the torch idiom with the zipsave found
in ``DIR`` (an export of an earlier commit: ``git archive COMMIT zipsave | tar -x -C DIR``), in
a subprocess, and times this zipsave's load of that archive (``before``: the state dicts in
``data``, the layout before 0.2 wrote them as members) in the same repetitions::

    git archive 2a79a11 zipsave | tar -x -C /tmp/old
    python benchmarks/statedict.py --old /tmp/old --out benchmarks/results/statedict-2026-11-30/statedict.json

Each load is timed ``--reps`` times after two untimed ones (warm: page cache, imports, first
call paid), the forms in turn within each repetition; the median is reported, and each
form's ratio to ``torch.load`` is the median of the per-repetition ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile


def build(n_params: float):
    import torch

    torch.manual_seed(0)
    if n_params < 1e5:  # 9 868 parameters, benchmarks/first_pairs.py's MLP
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 12))
        x = torch.randn(8, 64)
    else:  # 4 x Linear(500, 500): 1 002 000 parameters
        model = torch.nn.Sequential(*[torch.nn.Linear(500, 500) for _ in range(4)])
        x = torch.randn(8, 500)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(x).sum().backward()
    optimizer.step()
    return model, optimizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="a folder holding an earlier zipsave, to write the `before` archive")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)  # N PATH: write the idiom there
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    if args.worker:
        sys.path.insert(0, os.environ["STATEDICT_ZIPSAVE"])
        import zipsave

        model, optimizer = build(float(args.worker[0]))
        zipsave.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 5}, args.worker[1])
        return
    sys.path.insert(0, os.getcwd())
    import torch

    import zipsave

    results = {"zipsave": zipsave.__file__, "torch": torch.__version__, "reps": args.reps, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1e4, 1e6):
            model, optimizer = build(n)
            params = sum(p.numel() for p in model.parameters())
            names = ("before", "idiom", "objects", "torch") if args.old else ("idiom", "objects", "torch")
            paths = {name: os.path.join(tmp, f"{name}-{int(n)}.zip") for name in names}
            idiom = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 5}
            zipsave.save(idiom, paths["idiom"])
            zipsave.save({"model": model, "optimizer": optimizer, "epoch": 5}, paths["objects"])
            torch.save(idiom, paths["torch"])
            if args.old:
                env = {**os.environ, "STATEDICT_ZIPSAVE": os.path.abspath(args.old)}
                subprocess.run([sys.executable, __file__, "--worker", str(n), paths["before"]], check=True, env=env)
            times: dict[str, list[float]] = {name: [] for name in paths}
            for rep in range(args.reps + 2):
                for name, path in paths.items():
                    start = time.perf_counter()
                    if name == "torch":
                        torch.load(path, weights_only=True)
                    else:
                        zipsave.load(path)
                    if rep >= 2:
                        times[name].append(time.perf_counter() - start)
            members = {}
            for name in ("before", "idiom"):
                if name in paths:
                    with zipfile.ZipFile(paths[name]) as archive:
                        members[name] = {info.filename: info.file_size for info in archive.infolist()}
            row = {
                "params": params,
                "bytes": {name: os.path.getsize(path) for name, path in paths.items()},
                "load_ms": {name: round(statistics.median(ts) * 1e3, 3) for name, ts in times.items()},
                "load_vs_torch": {
                    name: round(statistics.median(t / u for t, u in zip(ts, times["torch"])), 3)
                    for name, ts in times.items()
                },
                "members": members,
            }
            results["rows"].append(row)
            print(f"{params} parameters")
            for name in paths:
                print(
                    f"  {name:8} {row['bytes'][name]:>10} bytes  load {row['load_ms'][name]:8.3f} ms  "
                    f"{row['load_vs_torch'][name]:6.3f}x torch.load"
                )
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
