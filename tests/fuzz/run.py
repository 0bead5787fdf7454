"""Run each atheris target for a bounded time from a seed corpus built here (valid pickles and
archives, and the hostile corpus of tests/data/hostile), each in its own process with an
address-space limit: ``python tests/fuzz/run.py --seconds 60``. Exits non-zero on a finding."""

from __future__ import annotations

import argparse
import collections
import io
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def seeds(folder: pathlib.Path, target: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if target == "unpickler":
        import numpy as np

        values = [collections.OrderedDict(a=1), {1, 2}, (1, 2.5, "x", b"y"), np.arange(4), np.random.default_rng(1),
                  np.dtype([("a", "<f4")]), collections.deque([1], 3)]
        for i, value in enumerate(values):
            for proto in (0, 2, 4, 5):
                (folder / f"v{i}_p{proto}").write_bytes(pickle.dumps(value, protocol=proto))
    else:
        sys.path.insert(0, str(ROOT))
        import torch

        import zipsave

        buf = io.BytesIO()
        zipsave.save_archive(buf, data={"a": 1, "s": {1, 2}}, params={"m": torch.nn.Linear(2, 2).state_dict()})
        (folder / "valid.zip").write_bytes(buf.getvalue())
        for path in sorted((ROOT / "tests" / "data" / "hostile").glob("*.zip")):
            if path.stat().st_size < 256 << 10:
                shutil.copy(path, folder / path.name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=60, help="time per target")
    parser.add_argument("--targets", nargs="*", default=["unpickler", "archive"])
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for target in args.targets:
            corpus = pathlib.Path(tmp) / target
            seeds(corpus, target)
            cmd = [sys.executable, str(HERE / f"fuzz_{target}.py"), str(corpus), f"-max_total_time={args.seconds}",
                   "-rss_limit_mb=4096", "-timeout=20", f"-artifact_prefix={tmp}/{target}-", "-print_final_stats=1"]
            print("+", " ".join(cmd), flush=True)
            code = subprocess.run(cmd, env=env, cwd=tmp).returncode
            if code:
                failed.append(target)
                for artifact in pathlib.Path(tmp).glob(f"{target}-*"):
                    print(f"finding: {artifact.name} ({artifact.stat().st_size} bytes): {artifact.read_bytes()[:200]!r}")
    if failed:
        print("fuzz findings in:", ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
