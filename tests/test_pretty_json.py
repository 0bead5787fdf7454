"""``_json_write.pretty_json``: the JSON members a save writes, byte for byte as orjson writes them,
without importing orjson for small documents (4-5 ms of a first save), and orjson's own
output or refusal for everything else."""

from __future__ import annotations

import collections
import enum
import json
import math
import random
import re
import struct

import orjson
import pytest

from zipsave import _json_write

#: Whether this orjson writes a positive exponent with its sign (``1e+20``: 3.13 does, 3.8 did not).
_PLUS = b"e+" in orjson.dumps(1e20)


def _orjson(value) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2)


def _as_orjson_writes(text: bytes) -> bytes:
    """``text`` (numbers only) with its exponents in this orjson's style."""
    return text if _PLUS else re.sub(rb"e\+", b"e", text)


def _floats():
    rng = random.Random(7)
    for _ in range(20_000):
        yield struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
    for exponent in range(-325, 309):
        for mantissa in ("1", "1.5", "9.999999999999999", "1.2345678901234567", "7"):
            yield float(f"{mantissa}e{exponent}")
    for _ in range(5_000):
        yield round(rng.uniform(-1e6, 1e6), rng.randint(0, 12))
        yield float(rng.randint(-(2**60), 2**60))
    yield from (0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1e15, 1e16, 1e-5, 1e-6)


def test_floats_are_written_as_orjson_writes_them_and_read_back_exactly():
    written = [_json_write.pretty_json(f) for f in _floats()]
    assert [_as_orjson_writes(w) for w in written] == [orjson.dumps(f) for f in _floats()]
    back = [json.loads(w) for w in written]
    assert all(
        b == f and math.copysign(1, b) == math.copysign(1, f) for b, f in zip(back, _floats()) if math.isfinite(f)
    )


def test_nan_and_the_infinities_are_null_as_orjson_writes_them():
    for value in (math.nan, math.inf, -math.inf):
        assert _json_write.pretty_json([value]) == _orjson([value])


def _tree(rng: random.Random, depth: int = 0):
    """A document of the kinds the writer takes itself: floats without exponents, so the bytes
    are the same for every orjson."""
    roll = rng.random()
    if depth > 6 or roll < 0.4:
        return rng.choice(
            [
                None,
                True,
                False,
                rng.randint(-(2**63), 2**64 - 1),
                rng.randint(-9, 9),
                round(rng.uniform(-1e6, 1e6), rng.randint(0, 9)),
                "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 12))),
            ]
        )
    if roll < 0.65:
        return [_tree(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if roll < 0.75:
        return tuple(_tree(rng, depth + 1) for _ in range(rng.randint(0, 4)))
    return {"".join(rng.choice(_CHARS) for _ in range(3)): _tree(rng, depth + 1) for _ in range(rng.randint(0, 4))}


#: Every ASCII character (control characters are escaped), and some beyond (written as UTF-8).
_CHARS = [chr(c) for c in range(128)] + ["é", "\u2028", "\u2029", "\U0001f600", "\ufeff", "\x85", "\xa0"]


def test_documents_are_the_bytes_orjson_writes():
    rng = random.Random(3)
    trees = [_tree(rng) for _ in range(3_000)]
    assert [_json_write.pretty_json(t) for t in trees] == [_orjson(t) for t in trees]
    assert _json_write.dump_json({"a": [1, {}], "b": []}) == b'{\n  "a": [\n    1,\n    {}\n  ],\n  "b": []\n}\n'


class _Kind(enum.IntEnum):
    ONE = 1


@pytest.mark.parametrize(
    "value",
    [
        collections.OrderedDict(a=1),  # a dict subclass
        {"a": _Kind.ONE},  # an int subclass
        {"a": [[[1]]] * 3, "b": "x" * (_json_write.WRITE_SMALL_BYTES + 1)},  # too long for Python's writer
        [[[[[]]]]],
    ],
    ids=["OrderedDict", "IntEnum", "large", "nested"],
)
def test_what_the_writer_leaves_to_orjson_is_orjson_s_output(value):
    assert _json_write.pretty_json(value) == _orjson(value)


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [{1: "a"}, 2**64, -(2**63) - 1, "\ud800", {"k": object()}, _nested(256)],
    ids=["int key", "2**64", "below int64", "lone surrogate", "object", "256 levels"],
)
def test_what_orjson_refuses_is_refused_as_orjson_refuses_it(value):
    with pytest.raises(TypeError):
        orjson.dumps(value, option=orjson.OPT_INDENT_2)
    with pytest.raises(TypeError):
        _json_write.pretty_json(value)


def test_deep_documents_orjson_writes_are_written():
    for depth in (199, 200, 201, 254):  # orjson 3.13 refuses 255 levels, 3.8 256
        assert _json_write.pretty_json(_nested(depth)) == _orjson(_nested(depth))
