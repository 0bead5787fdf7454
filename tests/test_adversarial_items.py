"""Array items whose bytes numpy never writes: a ``U`` character past U+10FFFF. numpy reads
one from any buffer (an ``.npy`` member, zipsave's base64 form, its own pickles) and then
fails on use: ``repr``, ``tolist`` and ``copy`` raise ``SystemError``. Each form is refused
where the array is built, at every door; what numpy itself writes (surrogates, either byte
order, generic-unit dates, even the ``np.zeros(2, "M8")`` whose ``repr`` fails) loads as it
was saved.

Zero-size items: an array of ``V0`` items (``np.zeros(5, [("x", "V0")])``) holds no byte, so
it is rebuilt from its shape, for as many elements as a value may allocate bytes.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import pathlib
import pickle
import re
import sys
import warnings

import numpy as np
import pytest

import zipsave
from zipsave import cli
from zipsave._codec._arrays import dtype_descr

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from adversarial.printed import base_members, write_zip  # noqa: E402

#: One character past U+10FFFF (a UTF-32 code numpy never writes), in either byte order.
_PAST_UNICODE = {"<U1": b"\xff\xff\xff\xff", ">U2": b"\x00\x00\x00a\x00\x11\x00\x00"}
_RECORD = np.dtype([("n", "<i4"), ("s", "<U2"), ("t", [("u", ">U1"), ("d", "<M8[s]")], (2,))])


def _bad_record() -> np.ndarray:
    arr = np.zeros(2, dtype=_RECORD)
    raw = bytearray(arr.tobytes())
    raw[4:8] = b"\x00\x00\x11\x00"  # the first record's first character: 0x110000
    return np.frombuffer(bytes(raw), dtype=_RECORD)


def _bad_nested() -> np.ndarray:
    arr = np.zeros(3, dtype=_RECORD)
    raw = bytearray(arr.tobytes())
    at = 2 * _RECORD.itemsize + _RECORD.fields["t"][1] + 12 + 0  # third record, `t[1].u`
    raw[at : at + 4] = b"\x7f\x00\x00\x00"  # big-endian 0x7f000000
    return np.frombuffer(bytes(raw), dtype=_RECORD)


def _entries() -> dict[str, tuple[dict[str, bytes], dict]]:
    """``{form: (extra members, data entry)}`` of each hostile array in each form."""
    out: dict[str, tuple[dict[str, bytes], dict]] = {}
    arrays = {
        "utf32_le": np.frombuffer(_PAST_UNICODE["<U1"], dtype="<U1"),
        "utf32_be": np.frombuffer(_PAST_UNICODE[">U2"], dtype=">U2"),
        "record": _bad_record(),
        "nested": _bad_nested(),
    }
    typ = "<class 'numpy.ndarray'>"
    for label, arr in arrays.items():
        body = {"kind": "ndarray", "dtype": dtype_descr(arr.dtype), "shape": list(arr.shape)}
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        out[f"npy_{label}"] = (
            {"arrays/0.npy": buf.getvalue()},
            {":type:": typ, ":zipsave:": {**body, "member": "arrays/0.npy"}},
        )
        out[f"native_{label}"] = (
            {},
            {":type:": typ, ":zipsave:": {**body, "b64": base64.b64encode(arr.tobytes()).decode()}},
        )
        for protocol in (2, 5):
            raw = pickle.dumps(arr, protocol=protocol)
            out[f"pickle{protocol}_{label}"] = ({}, {":type:": typ, ":serialized:": base64.b64encode(raw).decode()})
    record = _bad_record()[0]
    scalar = {"kind": "numpy_scalar", "dtype": dtype_descr(_RECORD), "b64": base64.b64encode(record.tobytes()).decode()}
    out["native_record_scalar"] = ({}, {":type:": "<class 'numpy.void'>", ":zipsave:": scalar})
    raw = pickle.dumps(record, protocol=2)
    out["pickle_record_scalar"] = (
        {},
        {":type:": "<class 'numpy.void'>", ":serialized:": base64.b64encode(raw).decode()},
    )
    return out


ENTRIES = _entries()


def _archive(tmp_path, members: dict[str, bytes], entry: dict) -> str:
    files = base_members()
    files.update(members)
    files["data"] = json.dumps({"lr": 0.5, "evil": entry}).encode()
    return write_zip(str(tmp_path / "items.zip"), files)


def _cli(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("form", sorted(ENTRIES))
def test_an_item_numpy_never_writes_is_refused_at_every_door(form, tmp_path):
    path = _archive(tmp_path, *ENTRIES[form])
    expected = "past U+10FFFF"
    for door in (zipsave.load, lambda p: zipsave.load_archive(p)[0]):
        # a skipped entry, or (an `.npy` member, corrupt) an IntegrityError: never the value
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                data = door(path)
            except zipsave.IntegrityError as err:
                assert form.startswith("npy_") and expected in str(err), err
                continue
        assert data["lr"] == 0.5 and "evil" not in data
        assert any(expected in str(w.message) for w in caught), [str(w.message) for w in caught]
    with pytest.raises(zipsave.ZipsaveError, match=re.escape(expected)) as caught:
        zipsave.read(path, "evil")
    assert "`evil`" in str(caught.value) and path in str(caught.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zipsave.ZipsaveWarning)
        code, text = _cli(["read", path, "evil"])
    assert code == 2 and expected in text and "zipsave bug" not in text


def test_an_in_place_read_leaves_no_such_item_behind(tmp_path):
    # SB3's and RLlib's doors read an array member straight into the live array: one that is
    # refused there leaves it holding only characters and dates numpy can show
    from zipsave._archive import ArchiveReader
    from zipsave._tensors import read_array_member_into

    arr = _bad_record()
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    path = write_zip(str(tmp_path / "live.zip"), {"arrays/0.npy": buf.getvalue()})
    live = np.zeros(2, dtype=_RECORD)
    with open(path, "rb") as fp, pytest.raises(zipsave.ZipsaveError, match=re.escape("past U+10FFFF")):
        read_array_member_into(ArchiveReader(fp), "arrays/0.npy", live)
    repr(live), live.tolist(), live.copy()  # SystemError on the old tree


def _generic_unit(values: list, code: str) -> np.ndarray:
    # numpy 2.5 deprecates converting values to the generic unit (arrays of it still load)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return np.array(values, dtype=code)


@pytest.mark.parametrize(
    "arr",
    [
        np.array(["a\ud800b", "\U0010ffff"]),
        np.array(["x", "y"], dtype=">U3"),
        _generic_unit(["NaT", "NaT"], "M8"),
        np.zeros(2, dtype="M8"),
        np.array([0, -(2**63) + 1], dtype="M8[s]"),
        _generic_unit([7], "m8"),
        np.zeros(2, dtype=_RECORD),
    ],
    ids=["surrogates", "big_endian", "generic_nat", "generic_zero", "seconds", "generic_timedelta", "record"],
)
@pytest.mark.filterwarnings("ignore:The 'generic' unit:DeprecationWarning")
def test_what_numpy_writes_loads_at_every_door(arr, tmp_path):
    big = np.repeat(arr, 40_000)  # an `arrays/` member as well as the base64 form
    zipsave.save({"small": arr, "big": big, "pickled": {"x": arr}}, tmp_path / "ok.zip")
    model = zipsave.load(tmp_path / "ok.zip")
    for key, want in (("small", arr), ("big", big)):
        assert model[key].dtype == want.dtype and model[key].tobytes() == want.tobytes(), key
        assert zipsave.read(tmp_path / "ok.zip", key).tobytes() == want.tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zipsave.ZipsaveWarning)  # a dict of arrays is pickled
        zipsave.save({"p": pickle.loads(pickle.dumps(arr))}, tmp_path / "p.zip")
    got = zipsave.load(tmp_path / "p.zip")["p"]  # numpy's pickle: native byte order
    assert got.astype(arr.dtype).tobytes() == arr.tobytes()


@pytest.mark.parametrize(
    "arr",
    [np.zeros(5, [("x", "V0")]), np.zeros((2, 3), [("x", "V0")]), np.zeros((), [("x", "V0")]), np.zeros(3, "V0")],
    ids=["record", "2d", "0d", "plain"],
)
def test_an_array_of_zero_size_items_loads_back(arr, tmp_path):
    # zipsave saved them and refused them on load ("holds no data")
    zipsave.save({"a": arr}, tmp_path / "v0.zip")
    got = zipsave.load(tmp_path / "v0.zip", strict=True)["a"]
    assert got.dtype == arr.dtype and got.shape == arr.shape
    assert got.tolist() == arr.tolist()


def test_zero_size_items_are_counted_against_the_allocation_budget(tmp_path):
    # no byte of data, and a count of 10**15 elements whose tolist() would never end
    body = {"kind": "ndarray", "dtype": dtype_descr(np.dtype([("x", "V0")])), "shape": [10**15], "b64": ""}
    path = _archive(tmp_path, {}, {":type:": "<class 'numpy.ndarray'>", ":zipsave:": body})
    with pytest.raises(zipsave.ArchiveLimitError, match=re.escape("1000000000000000 elements")):
        zipsave.load(path, strict=True)


# -- dtypes numpy builds from text but cannot use: a datetime unit of multiplier 0 -------------
def _zero_unit_entries() -> dict[str, tuple[dict[str, bytes], dict]]:
    from adversarial.asm import Emit, G, body, build, call, program

    raw = np.array([5, -(2**63)], dtype="<i8").tobytes()
    out: dict[str, tuple[dict[str, bytes], dict]] = {}
    typ = "<class 'numpy.ndarray'>"
    for unit in ("<M8[0s]", "<m8[0D]"):
        array = {"kind": "ndarray", "dtype": unit, "shape": [2], "b64": base64.b64encode(raw).decode()}
        out[f"native_{unit}"] = ({}, {":type:": typ, ":zipsave:": array})
        scalar = {"kind": "numpy_scalar", "dtype": unit, "b64": base64.b64encode(raw[:8]).decode()}
        out[f"scalar_{unit}"] = ({}, {":type:": "<class 'numpy.datetime64'>", ":zipsave:": scalar})
        out[f"dtype_{unit}"] = (
            {},
            {":type:": "<class 'numpy.dtype'>", ":zipsave:": {"kind": "numpy_dtype", "descr": unit}},
        )
        header = f"{{'descr': '{unit}', 'fortran_order': False, 'shape': (2,), }}".encode().ljust(117) + b"\n"
        npy = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + raw
        out[f"npy_{unit}"] = ({"arrays/0.npy": npy}, {":type:": typ, ":zipsave:": {**array, "member": "arrays/0.npy"}})
        # numpy's pickle of the dtype carries its unit as BUILD state, which numpy refuses to
        # set; a dtype made by its text alone (no BUILD) reaches the array's state
        dtype = Emit(G("numpy", "dtype").data + body((unit, False, True)) + b"R")
        empty = call(G("numpy._core.multiarray", "_reconstruct"), G("numpy", "ndarray"), (0,), b"b")
        pickled = program(build(empty, (1, (2,), dtype, False, raw)), 2)
        out[f"pickle_{unit}"] = ({}, {":type:": typ, ":serialized:": base64.b64encode(pickled).decode()})
    return out


ZERO_UNITS = _zero_unit_entries()


@pytest.mark.parametrize("form", sorted(ZERO_UNITS))
def test_a_datetime_unit_of_multiplier_zero_is_refused(form, tmp_path):
    # numpy parses `M8[0s]` and then cannot print, compare or pickle what has it (OverflowError,
    # TypeError): every value of such a dtype failed on use
    path = _archive(tmp_path, *ZERO_UNITS[form])
    expected = "unit of multiplier 0"
    with pytest.raises(zipsave.ZipsaveError, match=re.escape(expected)):
        zipsave.load(path, strict=True)
    with pytest.raises(zipsave.ZipsaveError, match=re.escape(expected)):
        zipsave.read(path, "evil")


@pytest.mark.parametrize(
    "value",
    [np.zeros(2, "M8"), np.zeros(2, "M8")[0], np.zeros(3, [("t", "M8"), ("x", "<i4")])],
    ids=["array", "scalar", "record"],
)
def test_the_command_shows_a_value_numpy_writes_but_cannot_print(value, tmp_path):
    # np.zeros(2, "M8") holds generic-unit dates of 0, whose repr raises ValueError: `zipsave
    # read` called the archive's value a zipsave bug
    zipsave.save({"d": value}, tmp_path / "m8.zip")
    code, text = _cli(["read", str(tmp_path / "m8.zip"), "d"])
    assert code == 0 and "zipsave bug" not in text, text
    assert "M8" in text.replace("datetime64", "M8") and "numpy cannot print" in text, text


# -- dtypes whose fields share one dtype: 2**depth fields from a few hundred bytes ------------
def _shared_fields(depth: int, *, shared: bool) -> np.dtype:
    dtype = np.dtype("<u1")
    for _ in range(depth):
        other = dtype if shared else pickle.loads(pickle.dumps(dtype))  # another object, same value
        dtype = np.dtype([("a", dtype), ("b", other)])
    return dtype


@pytest.mark.parametrize("value", ["dtype", "array"])
def test_a_dtype_whose_fields_share_one_dtype_is_refused_before_it_is_walked(value, tmp_path):
    # pickle writes a dtype object used by two fields once, so 1.3 KB stood for 2**19 fields;
    # numpy's repr of it, zipsave's own checks and a rebuild walked every one (2**30: never ending)
    dtype = _shared_fields(18, shared=True)
    raw = pickle.dumps(dtype if value == "dtype" else np.zeros(0, dtype), protocol=2)
    assert len(raw) < 2000
    entry = {":type:": "<class 'numpy.dtype'>", ":serialized:": base64.b64encode(raw).decode()}
    with pytest.raises(zipsave.ZipsaveError, match="counted through its nesting"):
        zipsave.load(_archive(tmp_path, {}, entry), strict=True)


def test_a_dtype_of_many_fields_each_its_own_still_loads(tmp_path):
    dtype = _shared_fields(9, shared=False)  # 2**10 - 1 fields and dtypes, none shared
    arr = np.zeros(3, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zipsave.ZipsaveWarning)
        zipsave.save({"a": arr, "p": {"x": arr}}, tmp_path / "ok.zip")
    got = zipsave.load(tmp_path / "ok.zip", strict=True)
    assert got["a"].dtype == dtype and got["p"]["x"].dtype == dtype
