"""Generators of hostile *values*: ``.pth`` members whose tensors are not what they claim (every
layout torch's loader builds, with broken invariants or views outside their storage), ``.npy``
members whose header disagrees with what ``data`` declares (every dtype), and the genuine
counterparts real libraries write, which must keep loading.

A ``.pth`` payload is a pickle written opcode by opcode (:mod:`.asm`): any global, any
arguments, storages as torch's persistent ids, so nothing here depends on torch agreeing to
build the hostile value. Each is delivered stored (zipsave's own reader) and deflated (the
``torch.load`` fallback), so both paths meet every family.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import pickle
import zipfile
from typing import Any

import numpy as np

from .asm import Emit, _Pickler

#: torch's storage class per dtype name, for persistent ids (``UntypedStorage`` for the rest).
_STORAGE = {
    "float32": "FloatStorage",
    "float64": "DoubleStorage",
    "int64": "LongStorage",
    "int32": "IntStorage",
    "uint8": "ByteStorage",
    "bool": "BoolStorage",
    "float16": "HalfStorage",
}


def G(module: str, name: str) -> Emit:
    """The global ``module.name`` with protocol 2's GLOBAL opcode (torch's weights-only
    unpickler reads what torch.save writes, not protocol 4's STACK_GLOBAL)."""
    return Emit(pickle.GLOBAL + f"{module}\n{name}\n".encode())


@dataclasses.dataclass
class Storage:
    """A storage record: its key, torch storage class, declared element count and bytes."""

    key: str
    stype: str
    numel: int
    data: bytes


class Call:
    """``module.name(*args)`` in the pickle (STACK_GLOBAL, the arguments, REDUCE)."""

    def __init__(self, target: str, *args: Any) -> None:
        self.module, _, self.name = target.rpartition(".")
        self.args = args


class _P(_Pickler):
    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        if isinstance(obj, Call):
            self.write(G(obj.module, obj.name).data)
            self.save(tuple(obj.args))
            self.write(pickle.REDUCE)
            return
        super().save(obj, save_persistent_id)

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, Storage):
            module = "torch.storage" if obj.stype == "UntypedStorage" else "torch"
            return ("storage", G(module, obj.stype), obj.key, "cpu", obj.numel)
        return None


def _pickle(tree: Any) -> bytes:
    buf = io.BytesIO()
    pickler = _P(buf, protocol=2)
    pickler.fast = True
    pickler.dump(tree)
    return buf.getvalue()


def _storages(tree: Any, found: dict[str, bytes]) -> None:
    if isinstance(tree, Storage):
        found.setdefault(tree.key, tree.data)
    elif isinstance(tree, Call):
        _storages(tree.args, found)
    elif isinstance(tree, dict):
        for v in tree.values():
            _storages(v, found)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            _storages(v, found)


def pth(tree: Any, *, deflate: bool = False, extra_records: dict[str, bytes] | None = None) -> bytes:
    """A torch.save-shaped zip of ``tree`` (records stored, or deflated: then only
    ``torch.load`` reads it, so zipsave takes its fallback path)."""
    records: dict[str, bytes] = {}
    _storages(tree, records)
    records.update(extra_records or {})
    out = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(out, "w", method) as zf:
        zf.writestr("archive/data.pkl", _pickle(tree))
        zf.writestr("archive/byteorder", "little")
        for key, raw in records.items():
            zf.writestr(f"archive/data/{key}", raw)
        zf.writestr("archive/version", "3\n")
    return out.getvalue()


_serial = iter(range(1 << 30))


def dense(
    values: Any,
    dtype: str = "float32",
    *,
    size: tuple | None = None,
    stride: tuple | None = None,
    offset: int = 0,
    numel: int | None = None,
) -> Call:
    """``_rebuild_tensor_v2`` of a storage holding ``values``; size/stride/offset/numel may lie."""
    arr = np.ascontiguousarray(np.asarray(values, dtype=dtype))
    shape = arr.shape if size is None else size
    if stride is None:
        stride = tuple(int(np.prod(shape[i + 1 :])) for i in range(len(shape)))
    storage = Storage(str(next(_serial)), _STORAGE[dtype], arr.size if numel is None else numel, arr.tobytes())
    return Call(
        "torch._utils._rebuild_tensor_v2",
        storage,
        offset,
        tuple(shape),
        tuple(stride),
        False,
        Call("collections.OrderedDict"),
    )


def raw_tensor(data: bytes, dtype: str, size: tuple, stride: tuple, offset: int = 0) -> Call:
    """``_rebuild_tensor_v3`` of an untyped storage holding ``data`` (any torch dtype, by name)."""
    storage = Storage(str(next(_serial)), "UntypedStorage", len(data), data)
    return Call(
        "torch._utils._rebuild_tensor_v3",
        storage,
        offset,
        tuple(size),
        tuple(stride),
        False,
        Call("collections.OrderedDict"),
        G("torch", dtype),
    )


def dense_bytes(t: Any) -> bytes:
    """A tensor's values as bytes, densified (what the worker reports for what it loaded)."""
    import torch

    d = t.detach()
    if d.layout == torch.sparse_coo:
        d = d.coalesce().to_dense()
    elif d.layout != torch.strided:
        d = d.to_dense()
    return (
        d.reshape(-1).clone(memory_format=torch.contiguous_format).view(torch.uint8).numpy().tobytes()
        if d.numel()
        else b""
    )


def sparse(layout: str, *parts: Any) -> Call:
    return Call(
        "torch._utils._rebuild_sparse_tensor", Call("torch.serialization._get_layout", f"torch.{layout}"), tuple(parts)
    )


def size(*dims: int) -> Call:
    return Call("torch.Size", list(dims))


def tensor_families() -> dict[str, Any]:
    """Hostile values, one per family: each must be refused wherever it is read."""
    i64 = "int64"
    return {
        # sparse COO: indices out of range (the SIGSEGV of issue 35), negative, of the wrong
        # dtype, a values shape that does not fit, a false "coalesced" claim.
        "coo_index_past_size": sparse("sparse_coo", dense([[0, 7], [0, 1]], i64), dense([1.0, 2.0]), size(3, 3), False),
        "coo_index_far_past_size": sparse(
            "sparse_coo", dense([[0, 1 << 40], [0, 1]], i64), dense([1.0, 2.0]), size(3, 3)
        ),
        "coo_negative_index": sparse("sparse_coo", dense([[0, -1], [0, 1]], i64), dense([1.0, 2.0]), size(3, 3), False),
        "coo_int32_indices": sparse(
            "sparse_coo", dense([[0, 1], [0, 1]], "int32"), dense([1.0, 2.0]), size(3, 3), False
        ),
        "coo_nnz_mismatch": sparse(
            "sparse_coo", dense([[0, 1, 2], [0, 1, 2]], i64), dense([1.0, 2.0]), size(3, 3), False
        ),
        "coo_values_dims": sparse(
            "sparse_coo", dense([[0, 1], [0, 1]], i64), dense([[1.0] * 5] * 2), size(3, 3), False
        ),
        "coo_false_coalesced": sparse(
            "sparse_coo", dense([[1, 0, 1], [1, 0, 1]], i64), dense([1.0, 2.0, 3.0]), size(3, 3), True
        ),
        # compressed layouts: indices not monotone, past the size, a last entry that is not nnz
        "csr_crow_decreasing": sparse(
            "sparse_csr", dense([0, 2, 1, 2], i64), dense([0, 1], i64), dense([1.0, 2.0]), size(3, 3)
        ),
        "csr_col_past_size": sparse(
            "sparse_csr", dense([0, 1, 2, 2], i64), dense([0, 9], i64), dense([1.0, 2.0]), size(3, 3)
        ),
        "csr_crow_last_not_nnz": sparse(
            "sparse_csr", dense([0, 1, 2, 9], i64), dense([0, 1], i64), dense([1.0, 2.0]), size(3, 3)
        ),
        "csr_crow_first_not_zero": sparse(
            "sparse_csr", dense([1, 1, 2, 2], i64), dense([0, 1], i64), dense([1.0, 2.0]), size(3, 3)
        ),
        "csc_row_negative": sparse(
            "sparse_csc", dense([0, 1, 2, 2], i64), dense([0, -4], i64), dense([1.0, 2.0]), size(3, 3)
        ),
        "bsr_col_past_size": sparse(
            "sparse_bsr", dense([0, 1, 1], i64), dense([5], i64), dense(np.ones((1, 2, 2))), size(4, 4)
        ),
        "bsc_blocks_dont_fit": sparse(
            "sparse_bsc", dense([0, 1, 1], i64), dense([0], i64), dense(np.ones((1, 3, 3))), size(4, 4)
        ),
        "sparse_unknown_layout": Call(
            "torch._utils._rebuild_sparse_tensor",
            Call("torch.serialization._get_layout", "torch._mkldnn"),
            (dense([0], i64), dense([1.0]), size(1)),
        ),
        # dense views that leave their storage
        "dense_size_past_storage": dense([1.0, 2.0, 3.0, 4.0], size=(1000,), stride=(1,)),
        "dense_offset_past_storage": dense([1.0, 2.0, 3.0, 4.0], size=(2,), stride=(1,), offset=3),
        "dense_stride_past_storage": dense([1.0, 2.0, 3.0, 4.0], size=(2,), stride=(9,)),
        "dense_negative_stride": dense([1.0, 2.0, 3.0, 4.0], size=(2,), stride=(-1,), offset=3),
        "dense_negative_offset": dense([1.0, 2.0, 3.0, 4.0], size=(2,), stride=(1,), offset=-1),
        "dense_negative_size": dense([1.0, 2.0, 3.0, 4.0], size=(-2,), stride=(1,)),
        "dense_stride_overflow": dense([1.0, 2.0, 3.0, 4.0], size=(2,), stride=(1 << 63,)),
        "dense_size_overflow": dense([1.0, 2.0, 3.0, 4.0], size=(1 << 62, 1 << 62), stride=(1, 1)),
        "dense_wraparound": dense([1.0, 2.0, 3.0, 4.0], size=(2, 3), stride=(1 << 62, 1 << 62)),
        "dense_storage_declared_short": dense([1.0, 2.0, 3.0, 4.0], numel=1),
        # a bool's byte other than 0 or 1: torch leaves it undefined (it prints True, yet
        # `torch.equal` calls it unequal to True, and `~` of it is True again)
        "bool_byte_not_0_or_1": raw_tensor(bytes([1, 0, 2, 255]), "bool", (4,), (1,)),
        "bool_view_byte_not_0_or_1": raw_tensor(bytes([1, 0, 1, 9, 1]), "bool", (2,), (2,), offset=1),
        # sub-byte integers: torch.load builds them, torch.save writes none, and no operation
        # reads them (repr, clone, ==, sum: `zipsave read` blamed itself)
        "sub_byte_int4": raw_tensor(bytes(range(4)), "int4", (4,), (1,)),
        "sub_byte_uint1": raw_tensor(bytes(range(4)), "uint1", (2, 2), (2, 1)),
        # inside its storage, but standing for 2**62 elements of it (stride 0): a sum or a
        # comparison (zipsave diff) of it never ended
        "dense_expanded_past_budget": dense([1.0], size=(1 << 62,), stride=(0,)),
        "dense_expanded_2d_past_budget": dense([1.0, 2.0], size=(1 << 20, 1 << 20, 2), stride=(0, 0, 1)),
        "dense_missing_record": Call(
            "torch._utils._rebuild_tensor_v2",
            Storage("gone", "FloatStorage", 4, b""),
            0,
            (4,),
            (1,),
            False,
            Call("collections.OrderedDict"),
        ),
        # layouts torch builds and zipsave does not read
        "quantized": Call(
            "torch._utils._rebuild_qtensor",
            Storage("q", "QInt8Storage", 4, b"\1" * 4),
            0,
            (4,),
            (1,),
            (G("torch", "per_tensor_affine"), 0.1, 0),
            False,
            Call("collections.OrderedDict"),
        ),
        "nested": Call(
            "torch._utils._rebuild_nested_tensor",
            dense([1.0, 2.0, 3.0]),
            dense([[1], [2]], i64),
            dense([[1], [1]], i64),
            dense([0, 1], i64),
        ),
        "meta": Call("torch._utils._rebuild_meta_tensor_no_storage", G("torch", "float32"), (1 << 20,), (1,), False),
        "wrapper_subclass": Call(
            "torch._utils._rebuild_wrapper_subclass",
            G("torch", "Tensor"),
            G("torch", "float32"),
            (4,),
            (1,),
            0,
            G("torch", "strided"),
            Call("torch.device", "cpu"),
            False,
        ),
        # tensors torch allocates without filling them from the file
        "float_tensor_ctor": Call("torch.FloatTensor", 4096),
        "tensor_ctor": Call("torch.Tensor", 4096),
        "from_type_ctor": Call(
            "torch._tensor._rebuild_from_type_v2", G("torch", "FloatTensor"), G("torch", "Tensor"), (64,), {}
        ),
        "bare_storage": Storage("s", "FloatStorage", 4, b"\0" * 16),
        "foreign_global": Call("torch.nn.modules.linear.Linear", 4, 4),
    }


def hostile_pth(name: str, value: Any, *, deflate: bool, key: str = "w", others: dict | None = None) -> bytes:
    tree = collections.OrderedDict(others or {"b": dense([1.0, 2.0, 3.0])})
    tree[key] = value
    return pth(tree, deflate=deflate)


# -- arrays -------------------------------------------------------------------------------
#: One dtype of each kind np.save writes (plain, byte-swapped, strings, datetimes, structured).
NORMAL_DTYPES = [
    "bool",
    "int8",
    "uint8",
    "<i2",
    ">i2",
    "<u4",
    "<i8",
    ">i8",
    "<f2",
    "<f4",
    ">f4",
    "<f8",
    "<c8",
    "<c16",
    "|S3",
    "<U2",
    "|V4",
    "<M8[s]",
    "<m8[ms]",
    [("x", "<f4"), ("y", "<i2")],
    {"names": ["a"], "formats": ["<u2"], "offsets": [2], "itemsize": 6},
    [("f", "?"), ("m", "?", (2,)), ("x", "<i2")],
]

#: A structured dtype whose booleans are a field and a sub-array field.
BOOL_RECORD = np.dtype([("x", "<f4"), ("f", "?"), ("m", "?", (2,))])


def legal_bools(arr: np.ndarray) -> np.ndarray:
    """``arr`` (C-contiguous) with every boolean byte of it made 0 or 1 (its low bit), and every
    ``U`` character within U+FFFF, as numpy and torch write them: an array made by viewing
    other bytes as bool (or str) holds others."""
    from zipsave._booleans import bool_mask

    mask = bool_mask(arr.dtype)
    if mask is not None and arr.size:
        rows = arr.reshape(-1).view(np.uint8).reshape(arr.size, arr.dtype.itemsize)
        rows[:, mask] &= 1
    if arr.dtype.kind == "U" and arr.size:  # characters as numpy writes them: at most U+10FFFF
        arr.reshape(-1).view(arr.dtype.str[0] + "u4")[...] &= 0xFFFF
    return arr


def unfilled_array_pickles() -> dict[str, bytes]:
    """Pickles of arrays numpy allocates and never fills, or whose elements read as bytes it
    never filled: ``ndarray(shape)`` called or created, ``_reconstruct`` with a shape and no
    BUILD after it (the array held heap addresses and freed secrets), and states of the
    unsized ``S0``/``<U0`` (``.repeat(2)`` of one gave back 8 KB of freed heap)."""
    from .asm import G as G4
    from .asm import body, build, call, newobj, program

    def dtype(descr: str) -> Emit:
        return Emit(G4("numpy", "dtype").data + body((descr, False, True)) + pickle.REDUCE)

    empty = call(G4("numpy._core.multiarray", "_reconstruct"), G4("numpy", "ndarray"), (0,), b"b")
    return {
        "ndarray_call": program(call(G4("numpy", "ndarray"), (8192,), "f8")),
        "ndarray_newobj": program(newobj(G4("numpy", "ndarray"), (8192,), "f8")),
        "reconstruct_unbuilt": program(
            call(G4("numpy._core.multiarray", "_reconstruct"), G4("numpy", "ndarray"), (65536,), b"b")
        ),
        "reconstruct_unbuilt_in_list": program(
            [call(G4("numpy._core.multiarray", "_reconstruct"), G4("numpy", "ndarray"), (4096, 2), b"b")]
        ),
        "state_unsized_bytes": program(build(empty, (1, (4096,), dtype("S0"), False, b"")), 2),
        "state_unsized_str": program(build(empty, (1, (4096,), dtype("<U0"), False, b"")), 2),
        "record_unsized_field": pickle.dumps(np.zeros(4096, dtype=[("x", "f4"), ("s", "S0")]), protocol=4),
    }


def stray_bool_entries() -> dict[str, tuple[dict[str, bytes], dict]]:
    """``{name: (members, data entry)}``: an array or scalar whose booleans hold bytes other
    than 0 and 1 (numpy and torch leave them undefined and never write them), in every form a
    ``data`` entry brings one: an ``.npy`` member, zipsave's native base64 form, and numpy's
    own pickles (``_reconstruct`` + BUILD, protocol 5's ``_frombuffer``)."""
    import base64

    from zipsave._codec import _arrays

    flat = np.frombuffer(bytes([1, 0, 2, 255]), dtype=np.bool_)
    record = np.zeros(2, dtype=BOOL_RECORD)
    record.view(np.uint8)[4::7] = 7  # field `f` of each record
    out: dict[str, tuple[dict[str, bytes], dict]] = {}
    for label, arr in (("bool", flat), ("record", record)):
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        body = {"kind": "ndarray", "dtype": _arrays.dtype_descr(arr.dtype), "shape": list(arr.shape)}
        typ = "<class 'numpy.ndarray'>"
        out[f"npy_{label}"] = (
            {"arrays/0.npy": buf.getvalue()},
            {":type:": typ, ":zipsave:": {**body, "member": "arrays/0.npy"}},
        )
        b64 = base64.b64encode(arr.tobytes()).decode()
        out[f"native_{label}"] = ({}, {":type:": typ, ":zipsave:": {**body, "b64": b64}})
        for protocol in (2, 5):
            raw = base64.b64encode(pickle.dumps(arr, protocol=protocol)).decode()
            out[f"pickle{protocol}_{label}"] = ({}, {":type:": typ, ":serialized:": raw})
    scalar = {
        "kind": "numpy_scalar",
        "dtype": _arrays.dtype_descr(BOOL_RECORD),
        "b64": base64.b64encode(record[:1].tobytes()).decode(),
    }
    out["native_record_scalar"] = ({}, {":type:": "<class 'numpy.void'>", ":zipsave:": scalar})
    return out


def npy(header_dtype: Any, shape: tuple, payload: bytes) -> bytes:
    """A .npy member with this header (dtype and shape as given, whatever the payload)."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(header_dtype)), "fortran_order": False, "shape": shape}
    if isinstance(header_dtype, str) and header_dtype in ("|S0", "<U0", "|V0"):
        header["descr"] = header_dtype  # np.dtype() already sized these; write them as a hostile file does
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue() + payload


def dtype_mismatches() -> list[tuple[str, bytes, Any, list[int]]]:
    """(name, .npy bytes, dtype declared in ``data``, shape declared in ``data``): every
    normal dtype against a header of another dtype, of an unsized one, of Python objects,
    and of a payload one byte short or long."""
    out = []
    for i, dtype in enumerate(NORMAL_DTYPES):
        declared = np.dtype(dtype)
        name = (
            declared.str.replace("|", "").replace("<", "le").replace(">", "be")
            if declared.fields is None
            else f"struct{i}"
        )
        other = np.dtype("<f8") if declared != np.dtype("<f8") else np.dtype("<i8")
        data = bytes(range(256)) * (4 * declared.itemsize // 256 + 1)
        out.append((f"{name}-as-{other.str}", npy(other, (4,), data[: 4 * other.itemsize]), dtype, [4]))
        for unsized in ("|S0", "<U0", "|V0"):
            out.append((f"{name}-as-{unsized}", npy(unsized, (1 << 20,), b""), dtype, [1 << 20]))
        out.append((f"{name}-short", npy(declared, (4,), data[: 4 * declared.itemsize - 1]), dtype, [4]))
        out.append((f"{name}-long", npy(declared, (4,), data[: 4 * declared.itemsize] + b"!"), dtype, [4]))
        out.append((f"{name}-shape-lie", npy(declared, (1 << 30,), data[: 4 * declared.itemsize]), dtype, [1 << 30]))
    out.append(("object-header", npy(np.dtype(object), (2,), b""), "<f8", [2]))
    return out


def rebuild_archive(base: bytes, replace: dict[str, bytes], data: dict | None = None) -> bytes:
    """``base`` (an archive's bytes) with members replaced or added, and ``data`` replaced;
    its manifest redone so that the archive is intact apart from what was put in."""
    import json
    import pathlib
    import sys

    hostile = pathlib.Path(__file__).resolve().parents[1] / "data" / "hostile"
    sys.path.insert(0, str(hostile))
    try:
        import make_hostile as mh
    finally:
        sys.path.remove(str(hostile))
    replace = dict(replace)
    if data is not None:
        replace["data"] = json.dumps(data).encode()
    members = []
    with zipfile.ZipFile(io.BytesIO(base)) as zf:
        for name in zf.namelist():
            if name != "manifest.json":
                members.append(mh.Member(name, replace.pop(name) if name in replace else zf.read(name)))
    members += [mh.Member(name, raw) for name, raw in replace.items()]
    return mh.build_zip(members)


# -- running loads in a worker process ----------------------------------------------------
class ValueWorker:
    """``values_worker.py`` in a process of its own: :meth:`run` sends one job and returns its
    result, or ``{"outcome": "crash"}`` when the process died on it (then a fresh one starts)."""

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.proc: Any = None
        self.serial = 0

    def _start(self) -> None:
        import os
        import pathlib
        import subprocess
        import sys

        root = pathlib.Path(__file__).resolve().parents[2]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
            "ZIPSAVE_VALUES_HEADROOM": str(2 << 30),
        }
        env.pop("PYTHONWARNINGS", None)
        self.err = open(os.path.join(self.cwd, "worker.err"), "a")  # noqa: SIM115 - closed in _stop
        self.proc = subprocess.Popen(
            [sys.executable, str(pathlib.Path(__file__).with_name("values_worker.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            cwd=self.cwd,
            env=env,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the values worker did not start: {self._stderr()}")

    def run(self, door: str, files: dict, key: str | None = None) -> dict:
        import json

        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.serial += 1
        self.proc.stdin.write(json.dumps({"id": self.serial, "door": door, "files": files, "key": key}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self._stop()
            return {"outcome": "crash", "error": f"exit {code}: {self._stderr()}"}
        return json.loads(line)

    def _stderr(self) -> str:
        import os

        with open(os.path.join(self.cwd, "worker.err")) as fp:
            return fp.read()[-1500:]

    def _stop(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout, self.err):
            try:
                stream.close()
            except OSError:  # the worker is gone: nothing to flush to
                pass
        self.proc.wait(timeout=60)
        self.proc = None

    def close(self) -> None:
        if self.proc is not None:
            self._stop()
