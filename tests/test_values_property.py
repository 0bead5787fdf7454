"""Property: every tensor and array a load returns can be summed, densified and copied without
error or crash, and holds only bytes from the archive.

Each example is an archive whose tensor storages and ``.npy`` payloads are filled with bytes
from a two-byte pattern, some of them with their view, indices or header mutated. It loads in a
worker process (``tests/adversarial/values_worker.py``) that uses every value it gets and
reports their bytes: an untouched value comes back byte for byte, a mutated one is refused or
holds only pattern bytes (and the zeros of a densified sparse tensor), never another byte.
"""

from __future__ import annotations

import collections
import math
import pathlib
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zipsave

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from adversarial import values  # noqa: E402

PATTERN = (0xA5, 0x5A)
ALLOWED = frozenset(PATTERN) | {0}
TORCH_DTYPES = [
    "uint8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "float8_e4m3fn",
    "uint16",
]
NUMPY_DTYPES = ["uint8", "<i2", ">i4", "<f4", ">f8", "<c8", "|S3", "|V2", [("a", "<u2"), ("b", "|u1")]]


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = values.ValueWorker(str(tmp_path_factory.mktemp("property-worker")))
    yield w
    w.close()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("property")
    clean = root / "clean.zip"
    zipsave.save_archive(clean, data={"lr": 0.1}, params={"p": {"x": torch.zeros(1)}})
    return {"root": root, "bytes": clean.read_bytes()}


def _pattern(draw, n: int) -> bytes:
    picks = (
        draw(st.lists(st.sampled_from(PATTERN), min_size=n, max_size=n))
        if n <= 64
        else [PATTERN[i % 2] for i in range(n)]
    )
    return bytes(picks)


@st.composite
def tensor_items(draw):
    """(pickled value, expected bytes or None when mutated)."""
    dtype = draw(st.sampled_from(TORCH_DTYPES))
    itemsize = getattr(torch, dtype).itemsize
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    numel = math.prod(shape)
    data = _pattern(draw, numel * itemsize)
    stride = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
    mutation = draw(st.sampled_from(["none", "none", "size", "stride", "offset", "transpose"]))
    if mutation == "transpose" and len(shape) == 2:
        return values.raw_tensor(data, dtype, shape[::-1], stride[::-1]), _transposed(data, shape, itemsize)
    if mutation == "size" and shape:
        shape = (shape[0] + draw(st.integers(1, 1 << 40)),) + shape[1:]
    elif mutation == "stride" and shape:
        stride = (draw(st.integers(0, 1 << 62)),) + stride[1:]
    elif mutation == "offset":
        return values.raw_tensor(data, dtype, shape, stride, draw(st.integers(1, 1 << 62))), None
    else:
        return values.raw_tensor(data, dtype, shape, stride), data
    return values.raw_tensor(data, dtype, shape, stride), None


def _transposed(data: bytes, shape: tuple, itemsize: int) -> bytes:
    rows, cols = shape
    items = [data[i * itemsize : (i + 1) * itemsize] for i in range(rows * cols)]
    return b"".join(items[r * cols + c] for c in range(cols) for r in range(rows))


@st.composite
def sparse_items(draw):
    n, m = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    cells = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, m - 1)), min_size=1, max_size=4, unique=True))
    cells.sort()
    rows, cols = [r for r, _ in cells], [c for _, c in cells]
    vals = np.frombuffer(_pattern(draw, 4 * len(cells)), dtype="<f4")
    mutate = draw(st.booleans())
    coo = draw(st.booleans())
    bad_rows, bad_cols = list(rows), list(cols)
    if mutate:  # one index out of range (past the size, negative, far past)
        which = draw(st.integers(0, len(cells) - 1))
        jump = draw(st.sampled_from([n + m, -1 - max(rows[which], cols[which]), 1 << 40]))
        (bad_rows if coo else bad_cols)[which] += jump
    if coo:
        indices = values.dense([bad_rows, bad_cols], "int64")
        item = values.sparse("sparse_coo", indices, values.dense(vals), values.size(n, m), True)
    else:
        crow = [sum(1 for r in rows if r < i) for i in range(n + 1)]
        item = values.sparse(
            "sparse_csr",
            values.dense(crow, "int64"),
            values.dense(bad_cols, "int64"),
            values.dense(vals),
            values.size(n, m),
        )
    expected = None
    if not mutate:
        dense = np.zeros((n, m), dtype="<f4")
        dense[rows, cols] = vals
        expected = dense.tobytes()
    return item, expected


@st.composite
def array_items(draw):
    dtype = np.dtype(draw(st.sampled_from(NUMPY_DTYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    data = _pattern(draw, math.prod(shape) * dtype.itemsize)
    mutation = draw(st.sampled_from(["none", "none", "shape", "dtype", "declared"]))
    header_dtype, header_shape, declared = dtype, shape, dtype
    if mutation == "shape":
        header_shape = (draw(st.integers(0, 1 << 40)),) + shape[1:]
    elif mutation == "dtype":
        header_dtype = draw(st.sampled_from(["|S0", "<U0", "|V0", "<f8", "|u1"]))
    elif mutation == "declared":
        declared = np.dtype(draw(st.sampled_from(["|S1", "<f8", "|u1"])))
    member = values.npy(header_dtype, header_shape, data)
    return (member, declared, list(shape)), data if mutation == "none" else None


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    tensors=st.lists(st.one_of(tensor_items(), sparse_items()), min_size=1, max_size=3),
    arrays=st.lists(array_items(), max_size=2),
    door=st.sampled_from(["load", "load_mmap", "load_archive"]),
)
def test_every_value_a_load_returns_is_usable_and_made_of_archive_bytes(worker, base, tensors, arrays, door):
    from zipsave._codec import _arrays

    tree = collections.OrderedDict((f"t{i}", item) for i, (item, _) in enumerate(tensors))
    members = {"p.pth": values.pth(tree)}
    data: dict = {"lr": 0.1}
    for i, ((member, declared, shape), _) in enumerate(arrays):
        members[f"arrays/{i}.npy"] = member
        data[f"a{i}"] = {
            ":type:": "<class 'numpy.ndarray'>",
            ":zipsave:": {
                "kind": "ndarray",
                "dtype": _arrays.dtype_descr(declared),
                "shape": shape,
                "member": f"arrays/{i}.npy",
            },
        }
    path = base["root"] / "example.zip"
    path.write_bytes(values.rebuild_archive(base["bytes"], members, data=data))
    result = worker.run(door, {"archive": str(path)})
    assert result["outcome"] in ("loaded", "refused"), result
    if result["outcome"] == "refused":
        return
    expected = {f"t{i}": want for i, (_, want) in enumerate(tensors)} | {
        f"a{i}": want for i, (_, want) in enumerate(arrays)
    }
    for path_, hexed in result["values"].items():
        name = path_.rsplit(".", 1)[-1]
        if name not in expected:
            continue
        got = bytes.fromhex(hexed)
        assert set(got) <= ALLOWED, f"{name} holds bytes the archive never held: {sorted(set(got) - ALLOWED)[:8]}"
        if expected[name] is not None:
            assert got == expected[name], name
