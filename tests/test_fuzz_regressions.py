"""Regressions from the atheris campaigns (tests/fuzz/): each minimised input, as bytes, must
be refused with the right ZipsaveError naming its member (it raised something else, or
crashed). Figures of the campaign that found them: the fuzz branch's report (issue 35)."""

from __future__ import annotations

import io
import re
import threading
import zipfile
import zlib

import pytest

from zipsave._archive import MemberView
from zipsave._tensors import read_npy
from zipsave.exceptions import DecodeError


def _npy(raw: bytes, member: str = "arrays/0.npy"):
    view = MemberView(io.BytesIO(raw), 0, len(raw), threading.Lock())
    return read_npy(view, member=member, expected_crc=zlib.crc32(raw))


def _npy_v1(header: str, data: bytes = b"") -> bytes:
    """A version 1.0 .npy member with ``header`` as its header text, padded as np.save pads."""
    text = header.encode("latin1")
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + data


# numpy retries a header ast.literal_eval refuses after tokenizing it (to drop Python 2 `L`
# suffixes); an unclosed bracket makes the tokenizer raise tokenize.TokenError, which escaped.
UNCLOSED = [
    # as the fuzzer found it (the seed d_i1, mutated)
    (
        b"\x93NUMPY\x01\x00v\x00{'descr': '(|i1', 'fortra%n_or '(|i1', 'fortra%n_order':der': False, 'shape': (2, 3), }"
        b"                    !           \n\x00\x01\x02\x03\x04\x05"
    ),
    _npy_v1("{'descr': '|u1', 'fortran_order': False, 'shape': (2,"),
    _npy_v1("{"),
]


@pytest.mark.parametrize("raw", UNCLOSED, ids=["found", "open-tuple", "open-brace"])
def test_a_header_with_an_unclosed_bracket_is_a_decode_error(raw):
    with pytest.raises(DecodeError, match=re.escape("array member `arrays/7.npy` is not a valid .npy file")):
        _npy(raw, "arrays/7.npy")


# numpy's header parser takes any ints as dimensions: (0, -4) has size 0, as many bytes as the
# member holds, and the final reshape raised ValueError; (-2, -2) has size 4. A zero beside
# dimensions whose product overflows makes size 0 too.
BAD_SHAPES = [
    # as the fuzzer found it (the seed zero_size, one byte changed)
    (
        b"\x93NUMPY\x01\x00v\x00" + b"{'descr': '<f4', 'fortran_order': False, 'shape': (0,-4), }".ljust(117) + b"\n",
        "(0, -4)",
        "a negative dimension",
    ),
    (
        _npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, -2), }", bytes(16)),
        "(-2, -2)",
        "a negative dimension",
    ),
    (
        _npy_v1("{'descr': '<i2', 'fortran_order': True, 'shape': (4611686018427387904, 4, 0), }"),
        "(4611686018427387904, 4, 0)",
        "its size overflows",
    ),
]


@pytest.mark.parametrize(("raw", "shape", "why"), BAD_SHAPES, ids=["found", "two-negatives", "overflow"])
def test_a_shape_no_array_has_is_a_decode_error(raw, shape, why):
    with pytest.raises(
        DecodeError,
        match=re.escape(
            f"array member `arrays/3.npy` declares shape {shape}, which no "
            f"array has ({why}); np.save writes no such header."
        ),
    ):
        _npy(raw, "arrays/3.npy")


def test_a_zero_size_array_with_large_dimensions_still_loads():
    raw = _npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 0, 3), }")
    assert _npy(raw).shape == (1048576, 0, 3)


def test_a_zero_size_array_stands_for_the_rows_it_walks():
    # (2**30, 2**30, 0) holds no byte, but tolist() and iteration visit its 2**60 rows
    raw = _npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 1073741824, 0), }")
    with pytest.raises(DecodeError, match=re.escape(f"stands for {2**60} elements")):
        _npy(raw)


def _sb3_style(data_text_edit) -> bytes:
    """An archive of a Box space and an array, its ``data`` JSON edited, re-written without
    ``manifest.json`` (as SB3 writes archives: the zip CRC-32s alone check the members)."""
    import gymnasium as gym
    import numpy as np

    import zipsave

    buf = io.BytesIO()
    zipsave.save_archive(
        buf, data={"space": gym.spaces.Box(-1, 1, (2,), np.float32), "x": np.arange(3, dtype=np.int16)}
    )
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            if name != "manifest.json":
                raw = src.read(name)
                dst.writestr(name, data_text_edit(raw) if name == "data" else raw)
    return out.getvalue()


# numpy refuses a comma string it cannot parse ("2 i<", the fuzzer's shuffle of "<i2") with a
# ValueError, where inspect and the space decoder caught only TypeError.
def _bad_array_dtype(raw: bytes) -> bytes:
    assert b'"dtype": "<i2"' in raw, raw[:400]
    return raw.replace(b'"dtype": "<i2"', b'"dtype": "2 i<"', 1)


def _bad_space_dtype(raw: bytes) -> bytes:
    assert b'"dtype": "float32"' in raw, raw[:400]
    return raw.replace(b'"dtype": "float32"', b'"dtype": "2 i<"', 1)


def test_inspect_names_a_dtype_numpy_cannot_parse_as_it_is():
    import zipsave

    info = zipsave.inspect(io.BytesIO(_sb3_style(_bad_array_dtype)))
    assert [e.summary for e in info.data if e.key == "x"] == ["ndarray 2 i< (3,)"]


def test_a_space_of_a_dtype_numpy_cannot_parse_is_skipped_naming_its_key():
    import zipsave

    with pytest.warns(
        zipsave.SkippedEntryWarning,
        match=re.escape(
            "skipped key `space` of member `data` (type <class 'gymnasium.spaces.box.Box'>): gymnasium space body: "
            "field `dtype` must be a numpy dtype name such as 'float32' or '<f4', got str '2 i<'."
        ),
    ):
        data, _, _ = zipsave.load_archive(io.BytesIO(_sb3_style(_bad_space_dtype)))
    assert list(data) == ["x"]
