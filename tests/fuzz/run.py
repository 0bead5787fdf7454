"""Run each atheris target for a bounded time from a seed corpus built here (valid pickles,
torch.save and np.save outputs of many kinds, archives, and the hostile corpus of
tests/data/hostile), each in its own process with an address-space limit:
``python tests/fuzz/run.py --seconds 30``. Exits non-zero on a finding.

Targets: ``unpickler`` (the restricted unpickler), ``pth`` (a ``.pth`` member),
``npy`` (an ``.npy`` member), ``archive`` (a whole archive: the strict zip reader, load,
inspect, verify). ``--corpus DIR`` keeps each target's corpus in ``DIR/<target>`` across runs."""

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

TARGETS = ("unpickler", "pth", "npy", "archive")
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def torch_values() -> dict:
    import torch

    base = torch.arange(12, dtype=torch.float32)
    coo = torch.sparse_coo_tensor(torch.tensor([[0, 1, 2], [2, 0, 1]]), torch.tensor([1.0, 2.0, 3.0]), (3, 3))
    return {
        "dense": {"w": torch.randn(3, 4), "b": torch.zeros(4, dtype=torch.float64)},
        "coo": {"s": coo},
        "coo_coalesced": {"s": coo.coalesce()},
        "csr": {"s": torch.eye(4).to_sparse_csr()},
        "csc": {"s": torch.eye(3).to_sparse_csc()},
        "view": {"v": base[2:10:2], "t": base.view(3, 4).t()},
        "shared": {"a": base, "b": base[3:], "c": base.view(2, 6)},
        "bf16": {"h": torch.randn(5).to(torch.bfloat16), "f16": torch.ones(2, dtype=torch.float16)},
        "bool": {"m": torch.tensor([True, False, True])},
        "ints": {
            "i8": torch.arange(4, dtype=torch.int8),
            "u8": torch.arange(4, dtype=torch.uint8),
            "i64": torch.arange(3),
            "c64": torch.ones(2, dtype=torch.complex64),
        },
        "empty": {"e": torch.empty(0, 3), "s": torch.tensor(1.5)},
        "param": {"p": torch.nn.Parameter(torch.ones(2))},
        "module": torch.nn.Linear(3, 2).state_dict(),
        "nested": {
            "opt": {
                "state": {0: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(2)}},
                "param_groups": [{"lr": 0.1, "params": [0]}],
            }
        },
    }


def numpy_values() -> dict:
    import numpy as np

    values = {
        f"d_{np.dtype(d).str.strip('<>|=')}": np.arange(6).astype(d).reshape(2, 3)
        for d in (
            "u1",
            "i1",
            "<i2",
            ">i4",
            "<i8",
            "<u8",
            "<f2",
            "<f4",
            ">f8",
            "<c8",
            "<c16",
            "?",
            "S3",
            "<U2",
            "V4",
            "<M8[s]",
            "<m8[ms]",
        )
    }
    values.update(
        {
            "scalar": np.array(3.5),
            "zero_size": np.zeros((0, 4), np.float32),
            "fortran": np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
            "structured": np.zeros(3, dtype=[("a", "<f4"), ("b", "<i2", (2,)), ("c", "S2")]),
            "nested": np.zeros(2, dtype=[("p", [("x", "<f8"), ("y", "u1")])]),
            "big_1d": np.arange(300, dtype=np.float64),
            "3d": np.ones((2, 1, 3), ">u2"),
        }
    )
    return values


def _cap(rss_mb: int):
    """An address-space limit for the target's process (libFuzzer's RSS check polls; this
    stops a single huge allocation at once): the RSS limit plus room for torch's mappings."""

    def limit() -> None:
        import resource

        cap = (rss_mb + 8192) << 20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return limit


def seeds(folder: pathlib.Path, target: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if target == "unpickler":
        import numpy as np

        values = [
            collections.OrderedDict(a=1),
            {1, 2},
            (1, 2.5, "x", b"y"),
            np.arange(4),
            np.random.default_rng(1),
            np.dtype([("a", "<f4")]),
            collections.deque([1], 3),
        ]
        for i, value in enumerate(values):
            for proto in (0, 2, 4, 5):
                (folder / f"v{i}_p{proto}").write_bytes(pickle.dumps(value, protocol=proto))
    elif target == "pth":
        import torch

        for name, value in torch_values().items():
            buf = io.BytesIO()
            torch.save(value, buf)
            (folder / f"{name}.pth").write_bytes(buf.getvalue())
    elif target == "npy":
        import numpy as np

        for name, value in numpy_values().items():
            buf = io.BytesIO()
            np.save(buf, value, allow_pickle=False)
            (folder / f"{name}.npy").write_bytes(buf.getvalue())
    else:
        sys.path.insert(0, str(ROOT))
        import numpy as np
        import torch

        import zipsave

        buf = io.BytesIO()
        zipsave.save_archive(buf, data={"a": 1, "s": {1, 2}}, params={"m": torch.nn.Linear(2, 2).state_dict()})
        (folder / "valid.zip").write_bytes(buf.getvalue())
        buf = io.BytesIO()
        values = torch_values()
        zipsave.save_archive(
            buf,
            data={"x": np.arange(6, dtype=np.int16).reshape(2, 3), "f": np.asfortranarray(np.ones((2, 3)))},
            params={"t": {k: v for k, v in values.items() if k in ("dense", "coo", "csr", "view")}},
        )
        (folder / "tensors.zip").write_bytes(buf.getvalue())
        for path in sorted((ROOT / "tests" / "data" / "hostile").glob("*.zip")):
            if path.stat().st_size < 256 << 10:
                shutil.copy(path, folder / path.name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=30, help="time per target")
    parser.add_argument("--targets", nargs="*", default=list(TARGETS), choices=TARGETS)
    parser.add_argument("--corpus", type=pathlib.Path, help="keep each target's corpus in CORPUS/<target>")
    parser.add_argument("--rss-mb", type=int, default=4096, help="libFuzzer's -rss_limit_mb and the address-space cap")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])}
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for target in args.targets:
            corpus = (args.corpus or pathlib.Path(tmp)) / target
            seeds(corpus, target)
            cmd = [
                sys.executable,
                str(HERE / f"fuzz_{target}.py"),
                str(corpus),
                f"-max_total_time={args.seconds}",
                f"-rss_limit_mb={args.rss_mb}",
                "-timeout=20",
                f"-artifact_prefix={tmp}/{target}-",
                "-print_final_stats=1",
            ]
            print("+", " ".join(cmd), flush=True)
            code = subprocess.run(cmd, env=env, cwd=tmp, preexec_fn=_cap(args.rss_mb)).returncode
            if code:
                failed.append(target)
                for artifact in pathlib.Path(tmp).glob(f"{target}-*"):
                    if args.corpus:
                        shutil.copy(artifact, args.corpus / artifact.name)
                    print(
                        f"finding: {artifact.name} ({artifact.stat().st_size} bytes): {artifact.read_bytes()[:200]!r}"
                    )
    if failed:
        print("fuzz findings in:", ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
