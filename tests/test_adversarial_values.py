"""Every tensor and array a load returns is checked for what it is (``tests/adversarial/values.py``).

Hostile tensors of every layout go to every door that reads a ``.pth`` member, stored (zipsave's
own reader) and deflated (the ``torch.load`` fallback); ``.npy`` members whose header disagrees
with ``data`` go to every door that reads arrays, for every dtype. Each load runs in a worker
process that then sums, densifies and copies everything it got: a value that slipped through
crashes the worker, which fails the test instead of pytest. Genuine torch.save and np.save
outputs go through the same doors and must come back byte for byte.
"""

from __future__ import annotations

import io
import pathlib
import re
import sys
import zipfile

import numpy as np
import pytest
import torch

import zipsave

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from adversarial import values  # noqa: E402

#: Doors that read a .pth member and build its tensors: each must refuse a hostile one.
BUILDING = ("load", "load_mmap", "load_archive", "read", "restore", "dcp_load", "cli_diff")
#: Doors that read without building (may succeed, must not crash or blame zipsave).
LISTING = ("cli_inspect", "cli_verify")
#: The fallback path (a deflated member) through the doors that reach it.
FALLBACK = ("load", "load_archive", "read", "dcp_load", "cli_diff")


_rebuild = values.rebuild_archive


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = values.ValueWorker(str(tmp_path_factory.mktemp("values-worker")))
    yield w
    w.close()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("values")
    clean = root / "clean.zip"
    zipsave.save_archive(clean, data={"lr": 0.1}, params={"p": {"w": torch.zeros(3, 3), "b": torch.zeros(3)}})
    return {"root": root, "clean": str(clean), "bytes": clean.read_bytes()}


def _deliver(worker, base, name: str, raw: bytes, doors: tuple, key: str = "p/w") -> dict[str, dict]:
    path = base["root"] / f"{name}.zip"
    path.write_bytes(raw)
    return {door: worker.run(door, {"archive": str(path), "clean": base["clean"]}, key) for door in doors}


def _problems(results: dict[str, dict], must_refuse: tuple) -> list[str]:
    out = []
    for door, result in results.items():
        if result["outcome"] in ("crash", "foreign"):
            out.append(f"{door}: {result['outcome']}: {result.get('error')}")
        elif door in must_refuse and result["outcome"] != "refused":
            out.append(f"{door}: {result['outcome']} (expected a ZipsaveError)")
    return out


# -- tensors: every layout x every door ----------------------------------------------------
FAMILIES = values.tensor_families()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_hostile_tensor_is_refused_at_every_door(family, worker, base):
    problems = []
    for deflate, doors in ((False, BUILDING + LISTING), (True, FALLBACK)):
        member = values.hostile_pth(family, FAMILIES[family], deflate=deflate)
        results = _deliver(worker, base, f"{family}-{deflate}", _rebuild(base["bytes"], {"p.pth": member}), doors)
        problems += [f"{'deflated' if deflate else 'stored'} {p}" for p in _problems(results, BUILDING)]
    assert not problems, "\n".join(problems)


def test_the_issue_35_sparse_tensor_is_refused_naming_member_and_key(base, tmp_path):
    # A COO tensor whose indices lie outside its size, as check_invariants=False builds it:
    # torch.load hands it back, and `.coalesce().to_dense()` then kills the interpreter.
    for deflate in (False, True):
        path = tmp_path / f"coo-{deflate}.zip"
        path.write_bytes(
            _rebuild(
                base["bytes"], {"p.pth": values.hostile_pth("coo", FAMILIES["coo_index_past_size"], deflate=deflate)}
            )
        )
        with pytest.raises(zipsave.ZipsaveError, match=re.escape("member `p.pth`")) as caught:
            zipsave.load_archive(path)
        assert "size is inconsistent with indices: for dim 0, size is 3 but found index 7" in str(caught.value)
        if not deflate:
            assert "`w` is a sparse tensor whose indices are invalid" in str(caught.value)


SB3_SAMPLE = ("coo_index_past_size", "csr_col_past_size", "dense_size_past_storage", "float_tensor_ctor", "quantized")


def test_hostile_tensor_is_refused_at_sb3_doors(worker, tmp_path):
    sb3 = pytest.importorskip("stable_baselines3")
    model = sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
    zipsave.save(model, tmp_path / "ppo.zip")
    clean = (tmp_path / "ppo.zip").read_bytes()
    real = {k: values.dense(v.detach().numpy()) for k, v in model.policy.state_dict().items()}
    problems = []
    for family in SB3_SAMPLE:
        member = values.pth({**real, "action_net.bias": FAMILIES[family]})
        path = tmp_path / f"{family}.zip"
        path.write_bytes(_rebuild(clean, {"policy.pth": member}))
        for door in ("set_parameters", "ppo_load"):
            result = worker.run(door, {"archive": str(path)})
            problems += [f"{family} {p}" for p in _problems({door: result}, (door,))]
    assert not problems, "\n".join(problems)


# -- genuine tensors: every door gives them back, byte for byte ------------------------------
def _genuine_tensors() -> dict[str, torch.Tensor]:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    out = {
        "coo": torch.sparse_coo_tensor([[0, 2], [1, 0]], [1.5, -2.0], (3, 3), check_invariants=True),
        "coo_coalesced": torch.eye(3).to_sparse(),
        "coo_hybrid": torch.sparse_coo_tensor([[0, 2]], [[1.0, 2.0], [3.0, 4.0]], (3, 2), check_invariants=True),
        "csr": torch.eye(3).to_sparse_csr(),
        "csc": torch.eye(3).to_sparse_csc(),
        "bsr": torch.eye(4).to_sparse_bsr((2, 2)),
        "bsc": torch.eye(4).to_sparse_bsc((2, 2)),
        "strided": base[:, 1::2],
        "transposed": base.t(),
        "row": base[1],
        "tail": base[2:],
        "expanded": base[:1].expand(3, 6),
        "empty": torch.zeros(0, 3),
        "empty_view": base[4:],
        "scalar": torch.tensor(3.0),
        "parameter": torch.nn.Parameter(torch.ones(2)),
    }
    for dtype in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
    ):
        out[str(dtype).removeprefix("torch.")] = torch.arange(6).reshape(2, 3).to(dtype)
    return out


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state:UserWarning")
def test_genuine_torch_save_outputs_load_at_every_door(worker, tmp_path):
    genuine = _genuine_tensors()
    path = tmp_path / "genuine.zip"
    zipsave.save_archive(path, params={"p": genuine})
    raw_member = zipfile.ZipFile(path).read("p.pth")
    buf = io.BytesIO()
    torch.save(genuine, buf)  # torch's own writer, as SB3 archives hold it
    deflated = io.BytesIO()
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    expected = {k: values.dense_bytes(v) for k, v in genuine.items()}
    for label, member in (("zipsave", raw_member), ("torch.save", buf.getvalue()), ("deflated", deflated.getvalue())):
        archive = tmp_path / f"{label}.zip"
        archive.write_bytes(_rebuild(path.read_bytes(), {"p.pth": member}))
        for door, prefix in (("load", "p."), ("load_mmap", "p."), ("load_archive", "1.p.")):
            result = worker.run(door, {"archive": str(archive)})
            assert result["outcome"] == "loaded", f"{label} {door}: {result}"
            got = {
                k.removeprefix(prefix): bytes.fromhex(v) for k, v in result["values"].items() if k.startswith(prefix)
            }
            assert got == expected, f"{label} {door}: {sorted(k for k in expected if got.get(k) != expected[k])}"
        for key in ("coo", "csr", "strided", "bfloat16", "float8_e4m3fn") if label != "deflated" else ():
            result = worker.run("read", {"archive": str(archive)}, f"p/{key}")
            assert result["outcome"] == "loaded" and bytes.fromhex(result["values"][""]) == expected[key], (label, key)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")
def test_genuine_tensors_torch_cannot_print_go_through_every_command(worker, tmp_path):
    # torch.save writes bits8, complex32 and float4 tensors, whose repr, tolist or == raise:
    # `zipsave read` blamed itself ("please report"), `read --json` of any complex tensor
    # raised TypeError, and `zipsave diff` called two such archives damaged.
    genuine = {
        "bits8": torch.arange(4, dtype=torch.uint8).view(torch.bits8),
        "bits16": torch.arange(4, dtype=torch.int16).view(torch.bits16),
        "complex32": torch.tensor([1 + 2j, -3j]).to(torch.complex32),
        "complex64": torch.tensor([1 + 2j, float("nan")]),
    }
    if hasattr(torch, "float4_e2m1fn_x2"):
        genuine["float4"] = torch.arange(4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    buf = io.BytesIO()
    torch.save(genuine, buf)
    base = tmp_path / "base.zip"
    zipsave.save_archive(base, params={"p": {"w": torch.zeros(1)}})
    archive, other = tmp_path / "genuine.zip", tmp_path / "other.zip"
    archive.write_bytes(_rebuild(base.read_bytes(), {"p.pth": buf.getvalue()}))
    changed = dict(genuine, bits8=torch.arange(1, 5, dtype=torch.uint8).view(torch.bits8))
    buf = io.BytesIO()
    torch.save(changed, buf)
    other.write_bytes(_rebuild(base.read_bytes(), {"p.pth": buf.getvalue()}))
    problems = []
    for key in genuine:
        for door in ("cli_read", "cli_read_json"):
            result = worker.run(door, {"archive": str(archive)}, f"p/{key}")
            if result["outcome"] != "loaded":
                problems.append(f"{door} {key}: {result}")
    for files in ({"clean": str(archive), "archive": str(archive)}, {"clean": str(archive), "archive": str(other)}):
        result = worker.run("cli_diff", files)
        if result["outcome"] == "foreign" or "damaged" in result.get("error", ""):
            problems.append(f"cli_diff: {result}")
    assert not problems, "\n".join(problems)


# -- arrays: every dtype x header mismatch ------------------------------------------------------
ARRAY_DOORS = ("load", "load_mmap", "load_archive", "read")


def _array_archive(base: dict, member: bytes, dtype, shape: list[int]) -> bytes:
    from zipsave._codec import _arrays

    entry = {
        ":type:": "<class 'numpy.ndarray'>",
        ":zipsave:": {
            "kind": "ndarray",
            "dtype": _arrays.dtype_descr(np.dtype(dtype)),
            "shape": shape,
            "member": "arrays/0.npy",
        },
    }
    return _rebuild(base["bytes"], {"arrays/0.npy": member}, data={"lr": 0.1, "evil": entry})


MISMATCHES = values.dtype_mismatches()


@pytest.mark.parametrize("case", MISMATCHES, ids=[c[0] for c in MISMATCHES])
def test_npy_header_that_disagrees_is_refused(case, worker, base):
    name, member, dtype, shape = case
    # a size lie is refused from the header alone, alike at every door: two doors suffice there
    doors = ARRAY_DOORS if "-as-" in name else ("load", "read")
    results = _deliver(worker, base, f"npy-{name}", _array_archive(base, member, dtype, shape), doors, key="evil")
    problems = _problems({"read": results.pop("read")}, ("read",))
    for door, result in results.items():
        # a whole load skips a broken data key with a warning (its documented rule) or refuses it
        if result["outcome"] == "loaded":
            if any(k.split(".")[-1] == "evil" for k in result["values"]):
                problems.append(f"{door} returned `evil`")
        else:
            problems += _problems({door: result}, (door,))
    assert not problems, "\n".join(problems)


def test_the_issue_35_unsized_header_is_refused_before_allocating(base, tmp_path):
    # Header `|S0` over no payload, `data` declaring `|S1`: numpy would hand back 2**30 bytes
    # it never filled (heap, on a small shape).
    path = tmp_path / "s0.zip"
    path.write_bytes(_array_archive(base, values.npy("|S0", (1 << 30,), b""), "|S1", [1 << 30]))
    for mmap in (False, True):
        with pytest.raises(
            zipsave.ZipsaveError,
            match=re.escape(
                "member `arrays/0.npy`: is corrupt or unreadable (array member `arrays/0.npy` declares dtype |S0 (0 bytes an item); an array is built only from bytes "
                "the member holds"
            ),
        ):
            zipsave.load(path, mmap=mmap)


def test_genuine_np_save_outputs_load_at_every_door(worker, base):
    problems = []
    for i, dtype in enumerate(values.NORMAL_DTYPES):
        arr = (
            np.frombuffer(bytes(range(256)) * 4, dtype=np.uint8)[: 6 * np.dtype(dtype).itemsize]
            .view(dtype)
            .reshape(2, 3)
        )
        if arr.dtype.kind in "mM":
            arr = arr.copy()
            arr.view(np.int64)[...] = np.arange(6).reshape(2, 3)  # no NaT patterns
        arr = values.legal_bools(arr.copy())  # booleans as numpy makes them: 0 or 1
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        results = _deliver(
            worker,
            base,
            f"genuine-npy-{i}",
            _array_archive(base, buf.getvalue(), arr.dtype, [2, 3]),
            ("load", "load_mmap", "read"),
            key="evil",
        )
        for door, result in results.items():
            got = result.get("values", {}).get("evil" if door != "read" else "")
            if result["outcome"] != "loaded" or bytes.fromhex(got or "") != arr.tobytes():
                problems.append(f"{arr.dtype} {door}: {result.get('outcome')} {result.get('error', '')[:200]}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("stride", [1, 2], ids=["contiguous", "strided"])
def test_dcp_load_refuses_a_bool_byte_other_than_0_or_1(stride, tmp_path):
    # DCP's reads go straight into the caller's tensors: a bool template took the bytes 2 and 255
    import zipsave.dcp

    base = tmp_path / "base.zip"
    zipsave.save_archive(base, params={"p": {"w": torch.zeros(4, dtype=torch.bool)}})
    stored = values.raw_tensor(bytes([1, 0, 2, 255] * stride), "bool", (4,), (stride,))
    path = tmp_path / "bools.zip"
    path.write_bytes(_rebuild(base.read_bytes(), {"p.pth": values.pth({"w": stored})}))
    with pytest.raises(
        zipsave.ArchiveFormatError, match=re.escape("tensor `p.w`: a bool holds a byte other than 0 or 1")
    ):
        zipsave.dcp.load({"p": {"w": torch.zeros(4, dtype=torch.bool)}}, path)


def test_restore_leaves_no_live_bool_byte_other_than_0_or_1(tmp_path):
    # restore reads records straight into the live tensors, then checks them: a bool buffer
    # kept 2 and 255 after the refusal
    class Masked(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("mask", torch.zeros(4, dtype=torch.bool))

    base = tmp_path / "base.zip"
    zipsave.save({"m": Masked()}, base)
    path = tmp_path / "bools.zip"
    stored = values.raw_tensor(bytes([1, 0, 2, 255]), "bool", (4,), (1,))
    path.write_bytes(_rebuild(base.read_bytes(), {"m.pth": values.pth({"mask": stored})}))
    live = Masked()
    with pytest.raises(
        zipsave.ArchiveFormatError, match=re.escape("Tensors of the live object were partly overwritten")
    ):
        zipsave.restore({"m": live}, path)
    assert live.mask.view(torch.uint8).tolist() == [1, 0, 1, 1]


def test_an_array_read_in_place_keeps_no_bool_byte_other_than_0_or_1(tmp_path):
    # a replay buffer's arrays are read straight into the live ones, then checked
    from zipsave._archive import ArchiveReader
    from zipsave._tensors import read_array_member_into

    members, _ = values.stray_bool_entries()["npy_record"]
    path = tmp_path / "bools.zip"
    path.write_bytes(values.rebuild_archive(_empty_zip(), members))
    live = np.zeros(2, dtype=values.BOOL_RECORD)
    with open(path, "rb") as fp:
        with pytest.raises(zipsave.DecodeError, match=re.escape("holds a boolean byte other than 0 or 1")):
            read_array_member_into(ArchiveReader(fp), "arrays/0.npy", live)
    assert live["f"].view(np.uint8).tolist() == [1, 1]


def _empty_zip() -> bytes:
    buf = io.BytesIO()
    zipfile.ZipFile(buf, "w").close()
    return buf.getvalue()


UNFILLED = values.unfilled_array_pickles()


def _read_refused_and_no_door_returned_evil(results: dict) -> None:
    """``read`` of `evil` was refused, and the other doors loaded the rest without it (or refused)."""
    problems = _problems({"read": results.pop("read")}, ("read",))
    for door, result in results.items():
        if result["outcome"] == "loaded" and any(k.split(".")[-1] == "evil" for k in result["values"]):
            problems.append(f"{door} returned `evil`")
        problems += _problems({door: result}, ())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", sorted(UNFILLED))
def test_a_pickled_array_holds_only_bytes_its_pickle_held(name, worker, base):
    # `ndarray(shape)` and `_reconstruct` with a shape and no BUILD gave back numpy's unfilled
    # memory (heap addresses, a freed secret); an unsized `S0` array gave it back on `.repeat(2)`.
    import base64

    entry = {":type:": "<class 'numpy.ndarray'>", ":serialized:": base64.b64encode(UNFILLED[name]).decode()}
    archive = _rebuild(base["bytes"], {}, data={"lr": 0.1, "evil": entry})
    results = _deliver(worker, base, f"unfilled-{name}", archive, ("load", "load_archive", "read"), key="evil")
    _read_refused_and_no_door_returned_evil(results)


@pytest.mark.parametrize(
    "text", ["1E+50000000", "-7E-50000000", "1" * 9000 + "E+999999"], ids=["large", "small", "long_digits"]
)
def test_a_decimal_is_a_ratio_of_bounded_integers(text, worker, base):
    # 12 bytes of `data` whose int() never ended: a decimal stands for integers of at most
    # MAX_INT_BITS bits (its exponent at least -39456, its adjusted exponent at most 39455)
    entry = {":type:": "<class 'decimal.Decimal'>", ":zipsave:": {"kind": "decimal", "value": text}}
    archive = _rebuild(
        base["bytes"],
        {},
        data={"lr": 0.1, "evil": entry, "fine": {**entry, ":zipsave:": {"kind": "decimal", "value": "1.5E-300"}}},
    )
    results = _deliver(worker, base, f"decimal-{text[-9:]}", archive, ("load", "read"), key="evil")
    assert results["read"]["outcome"] == "refused" and "a decimal's exponent is at least" in results["read"]["error"], (
        results
    )
    assert results["load"]["outcome"] == "loaded", results  # skipped with a warning, the rest loads


STRAY_BOOLS = values.stray_bool_entries()


@pytest.mark.parametrize("form", sorted(STRAY_BOOLS))
def test_a_boolean_byte_other_than_0_or_1_is_refused(form, worker, base):
    # numpy read an .npy member, a native array and its own pickles of a bool array (or of a
    # record with bool fields) whatever bytes they held: 2 printed True, compared unequal to
    # True and stayed True under `~`.
    members, entry = STRAY_BOOLS[form]
    archive = _rebuild(base["bytes"], members, data={"lr": 0.1, "evil": entry})
    results = _deliver(worker, base, f"bools-{form}", archive, ARRAY_DOORS, key="evil")
    read = results.pop("read")
    problems = _problems({"read": read}, ("read",))
    if "boolean byte other than 0 or 1" not in read.get("error", ""):
        problems.append(f"read: {read}")
    for door, result in results.items():
        if result["outcome"] == "loaded" and any(k.split(".")[-1] == "evil" for k in result["values"]):
            problems.append(f"{door} returned `evil`")
        problems += _problems({door: result}, ())
    assert not problems, "\n".join(problems)


def test_genuine_booleans_load_at_every_door(worker, base):
    import base64
    import pickle

    from zipsave._codec._arrays import dtype_descr

    arr = np.zeros(3, dtype=values.BOOL_RECORD)
    arr["f"], arr["m"] = [True, False, True], [[True, False]] * 3
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    npy = {"kind": "ndarray", "dtype": dtype_descr(arr.dtype), "shape": [3], "member": "arrays/0.npy"}
    pickled = base64.b64encode(pickle.dumps(arr, protocol=5)).decode()
    for form, entry, members in (
        ("npy", {":zipsave:": npy}, {"arrays/0.npy": buf.getvalue()}),
        ("pickle", {":serialized:": pickled}, {}),
    ):
        value = {":type:": "<class 'numpy.ndarray'>", **entry}
        archive = _rebuild(base["bytes"], members, data={"lr": 0.1, "evil": value})
        for door, result in _deliver(worker, base, f"bools-ok-{form}", archive, ("load", "read"), key="evil").items():
            got = result.get("values", {}).get("evil" if door != "read" else "")
            assert result["outcome"] == "loaded" and bytes.fromhex(got or "") == arr.tobytes(), (form, door, result)


# -- tensors pickled into `data` (sb3-contrib's ARS stores its weights so) ----------------------
def _pickled_tensor(size: tuple, stride: tuple, offset: int = 0) -> dict:
    import base64
    import warnings

    from adversarial.asm import G, call, program

    buf = io.BytesIO()
    # what pickling a tensor writes (Tensor.__reduce_ex__): a TypedStorage in torch's legacy
    # format; an UntypedStorage there is refused before the view is ever looked at
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # TypedStorage is deprecated
        torch.save(torch.arange(4.0).storage(), buf, _use_new_zipfile_serialization=False)
    raw = program(
        call(
            G("torch._utils", "_rebuild_tensor_v2"),
            call(G("torch.storage", "_load_from_bytes"), buf.getvalue()),
            offset,
            size,
            stride,
            False,
            call(G("collections", "OrderedDict")),
        ),
        2,
    )
    return {":type:": "<class 'torch.Tensor'>", ":serialized:": base64.b64encode(raw).decode()}


@pytest.mark.parametrize(
    "view",
    [((100_000,), (1,), 0), ((2,), (1,), 3), ((2, 2), (1 << 40, 1), 0), ((1 << 62,), (0,), 0)],
    ids=["size", "offset", "stride", "expanded"],
)
def test_a_pickled_tensor_past_its_storage_never_loads(view, worker, base):
    # torch's set_() grows a storage too small for the view, with memory it never fills
    archive = _rebuild(base["bytes"], {}, data={"lr": 0.1, "evil": _pickled_tensor(*view)})
    results = _deliver(
        worker, base, f"pickled-{view[2]}-{len(view[0])}", archive, ("load", "load_archive", "read"), key="evil"
    )
    _read_refused_and_no_door_returned_evil(results)


# -- tensors in `data`'s native form (zipsave's own JSON) -------------------------------------
def _native_tensor(dtype: str, shape: list, data: bytes) -> dict:
    import base64

    raw = {"kind": "ndarray", "dtype": "|u1", "shape": [len(data)], "b64": base64.b64encode(data).decode()}
    return {
        ":type:": "<class 'torch.Tensor'>",
        ":zipsave:": {"kind": "tensor", "dtype": dtype, "shape": shape, "data": raw},
    }


def test_a_native_tensor_is_checked_like_any_other(base, tmp_path):
    # The native form built its tensor with `view(dtype)` or `torch.empty` and returned it
    # unchecked: a quantized tensor (empty), and a plain tensor of a quantized dtype, which has
    # no quantizer (its repr and every operation raised NotImplementedError).
    data = {
        "lr": 0.1,
        "q_empty": _native_tensor("qint8", [0], b""),
        "q_dtype": _native_tensor("qint32", [2], bytes(8)),
        "fine": _native_tensor("float32", [2], np.array([1.5, -2.0], dtype=np.float32).tobytes()),
    }
    path = tmp_path / "native.zip"
    path.write_bytes(_rebuild(base["bytes"], {}, data=data))
    with pytest.warns(zipsave.SkippedEntryWarning) as caught:
        model = zipsave.load(path)
    assert "q_empty" not in model and "q_dtype" not in model
    assert torch.equal(model["fine"], torch.tensor([1.5, -2.0]))
    text = " ".join(str(w.message) for w in caught)
    assert "quantized dtype torch.qint8" in text and "quantized dtype torch.qint32" in text
