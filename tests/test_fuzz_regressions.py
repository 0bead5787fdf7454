"""Regressions from the atheris campaigns (tests/fuzz/): each minimised input, as bytes, must
be refused with the right ZipsaveError naming its member (it raised something else, or
crashed). Figures of the campaign that found them: the fuzz branch's report (issue 35)."""

from __future__ import annotations

import io
import re
import threading
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
    (b"\x93NUMPY\x01\x00v\x00{'descr': '(|i1', 'fortra%n_or '(|i1', 'fortra%n_order':der': False, 'shape': (2, 3), }"
     b"                    !           \n\x00\x01\x02\x03\x04\x05"),
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
    (b"\x93NUMPY\x01\x00v\x00" + b"{'descr': '<f4', 'fortran_order': False, 'shape': (0,-4), }".ljust(117) + b"\n",
     "(0, -4)", "a negative dimension"),
    (_npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, -2), }", bytes(16)), "(-2, -2)",
     "a negative dimension"),
    (_npy_v1("{'descr': '<i2', 'fortran_order': True, 'shape': (4611686018427387904, 4, 0), }"),
     "(4611686018427387904, 4, 0)", "its size overflows"),
]


@pytest.mark.parametrize(("raw", "shape", "why"), BAD_SHAPES, ids=["found", "two-negatives", "overflow"])
def test_a_shape_no_array_has_is_a_decode_error(raw, shape, why):
    with pytest.raises(DecodeError, match=re.escape(f"array member `arrays/3.npy` declares shape {shape}, which no "
                                                    f"array has ({why}); np.save writes no such header.")):
        _npy(raw, "arrays/3.npy")


def test_a_zero_size_array_with_large_dimensions_still_loads():
    raw = _npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 1073741824, 0), }")
    assert _npy(raw).shape == (1073741824, 1073741824, 0)
