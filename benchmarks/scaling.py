"""Time against archive shape (issue 40): each dimension an archive's author controls is grown
10x, and the time of each reading verb should grow about as much as the archive's bytes
(10x for most; folder depth grows the bytes with the square of the depth), not 100x.

    python benchmarks/scaling.py [--n 1] [--out benchmarks/results/scaling.json]

``--n`` scales every base size. Times are the best of three runs in this process, after one
warm-up load (imports). ``tests/test_linear_time.py`` checks the same dimensions by counting
calls; this measures them.
"""

from __future__ import annotations

import argparse
import io
import json
import time
import warnings
import zipfile
from collections.abc import Callable

import numpy as np
import torch

import zipsave
from zipsave._tools._verify import verify


def zip_of(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


def saved(obj: object) -> bytes:
    out = io.BytesIO()
    zipsave.save(obj, out)
    return out.getvalue()


def npy(value: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, value, allow_pickle=False)
    return out.getvalue()


def arrays(n: int) -> bytes:
    items = [
        {
            ":type:": "<class 'numpy.ndarray'>",
            ":zipsave:": {"kind": "ndarray", "dtype": "<f8", "shape": [2], "member": f"arrays/{i}.npy"},
        }
        for i in range(n)
    ]
    data = {"a": {":type:": "<class 'list'>", ":zipsave:": {"kind": "list", "items": items}}}
    return zip_of({"data": json.dumps(data).encode(), **{f"arrays/{i}.npy": npy(np.arange(2.0) + i) for i in range(n)}})


def missing_members(n: int) -> bytes:
    with zipfile.ZipFile(io.BytesIO(saved({"a": 1}))) as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    manifest = json.loads(members["manifest.json"])
    manifest["members"].update({f"gone{i}.pth": {"size": 1, "crc32": "00000000"} for i in range(n)})
    members["manifest.json"] = json.dumps(manifest).encode()
    return zip_of(members)


#: dimension -> (base size, archive builder); tests/test_linear_time.py builds its archives with
#: these builders too.
DIMENSIONS: dict[str, tuple[int, Callable[[int], bytes]]] = {
    "members": (2000, lambda n: zip_of({"data": b"{}", **{f"extra{i}.txt": b"" for i in range(n)}})),
    "component folders": (1000, lambda n: zip_of({"data": b"{}", **{f"comp{i}/data": b'{"x": 1}' for i in range(n)}})),
    "folder depth": (150, lambda n: zip_of({"data": b"{}", **{"d/" * d + "data": b'{"x": 1}' for d in range(1, n)}})),
    "data keys": (10000, lambda n: saved({f"key{i}": i for i in range(n)})),
    "manifest entries (missing members)": (10000, missing_members),
    "tensors per .pth": (
        300,
        lambda n: saved({"m": torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(2)) for _ in range(n)])}),
    ),
    "arrays": (1000, arrays),
    "name length": (3000, lambda n: zip_of({"data": json.dumps({"k" * n: 1}).encode(), "e/" * n + "data": b"{}"})),
}

VERBS: dict[str, Callable[[io.BytesIO], object]] = {
    "load": lambda f: zipsave.load(f),
    "inspect": lambda f: zipsave.inspect(f),
    "verify": lambda f: verify(f),
}


def _time(verb: Callable[[io.BytesIO], object], raw: bytes) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        try:
            verb(io.BytesIO(raw))
        except zipsave.ZipsaveError:
            pass
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=float, default=1.0, help="scale every base size")
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # skipped entries of hostile shapes warn, one each
    zipsave.load(io.BytesIO(saved({"a": 1})))
    rows = []
    print(f"{'dimension':36s} {'verb':8s} {'N':>7s} {'bytes x':>7s} {'time N':>9s} {'time 10N':>9s} {'time x':>6s}")
    for dimension, (base, build) in DIMENSIONS.items():
        n = max(2, int(base * args.n))
        small, large = build(n), build(10 * n)
        for verb, run in VERBS.items():
            t1, t10 = _time(run, small), _time(run, large)
            grown = len(large) / len(small)
            rows.append(
                {
                    "dimension": dimension,
                    "verb": verb,
                    "n": n,
                    "bytes_ratio": grown,
                    "seconds_n": t1,
                    "seconds_10n": t10,
                    "time_ratio": t10 / t1,
                }
            )
            print(f"{dimension:36s} {verb:8s} {n:7d} {grown:7.1f} {t1:9.4f} {t10:9.4f} {t10 / t1:6.1f}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
