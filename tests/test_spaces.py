"""Tests for zipsave._codec._spaces: gymnasium spaces <-> JSON-native bodies."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from typing import Any

import gymnasium
import numpy as np
import orjson
import pytest
from gymnasium import spaces
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from zipsave._codec._spaces import decode_space, encode_space, is_space
from zipsave.exceptions import DecodeError, EncodeError

# What the installed gymnasium has: 0.29 lacks OneOf, Discrete(dtype=) and Dict(sort_keys=).
# Tests of those run where they exist; on an older gymnasium the "degrade" tests below check
# what happens to bodies that use them instead.
GYM = gymnasium.__version__
HAS_ONEOF = hasattr(spaces, "OneOf")
HAS_DISCRETE_DTYPE = "dtype" in inspect.signature(spaces.Discrete).parameters
HAS_SORT_KEYS = "sort_keys" in inspect.signature(spaces.Dict).parameters
needs_oneof = pytest.mark.skipif(not HAS_ONEOF, reason=f"gymnasium {GYM} has no OneOf")
needs_discrete_dtype = pytest.mark.skipif(not HAS_DISCRETE_DTYPE, reason=f"gymnasium {GYM} has no Discrete(dtype=...)")

# A test-only stand-in for the codec's callbacks: arrays as {"dtype", "shape", "data"},
# non-finite floats as strings, tuples tagged, everything JSON-native as it is.


def enc(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        data = value.ravel().tolist()
        if value.dtype.kind == "f":
            data = [x if np.isfinite(x) else str(x) for x in data]
        return {"dtype": value.dtype.str, "shape": list(value.shape), "data": data}
    if isinstance(value, tuple):
        return {"tuple": [enc(v) for v in value]}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"test codec cannot encode {type(value).__name__}")


def dec(value: Any) -> Any:
    if isinstance(value, dict) and "tuple" in value:
        return tuple(dec(v) for v in value["tuple"])
    if isinstance(value, dict):
        data = [float(x) if isinstance(x, str) else x for x in value["data"]]
        return np.array(data, dtype=value["dtype"]).reshape(value["shape"])
    return value


def json_round_trip(space: spaces.Space) -> tuple[dict, spaces.Space]:
    """Encode, pass through orjson bytes (proving the body is pure JSON), decode."""
    body = encode_space(space, enc)
    loaded = orjson.loads(orjson.dumps(body))
    return body, decode_space(loaded, dec)


def assert_same_value(a: Any, b: Any) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same_value(a[k], b[k])
    elif isinstance(a, tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_value(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def in_order(mapping: dict) -> spaces.Dict:
    """A Dict keeping the mapping's insertion order, on every gymnasium."""
    if HAS_SORT_KEYS:
        return spaces.Dict(mapping, sort_keys=False)
    return spaces.Dict(list(mapping.items()))  # gymnasium 0.29 keeps a sequence's order


def nested() -> spaces.Dict:
    inner = in_order({"z": spaces.Discrete(2), "a": spaces.Box(-1.0, 1.0, (2,))})
    return in_order(
        {
            "obs": spaces.Tuple([inner, spaces.MultiBinary(3)]),
            "extra": spaces.Text(4),
        }
    )


SPACES = {
    "box": lambda: spaces.Box(0.0, 1.0, (3,)),
    "box-inf-float64": lambda: spaces.Box(-np.inf, np.inf, (2, 3), dtype=np.float64),
    "box-half-bounded": lambda: spaces.Box(f32(-np.inf, 0.0), f32(1.0, np.inf)),
    "box-image-uint8": lambda: spaces.Box(0, 255, (84, 84, 3), dtype=np.uint8),
    "box-int32-inf": lambda: spaces.Box(-np.inf, np.inf, (2,), dtype=np.int32),
    "box-int64-inf-below": lambda: spaces.Box(-np.inf, 5, (2,), dtype=np.int64),
    "box-bool": lambda: spaces.Box(0, 1, (4,), dtype=bool),
    "box-0d": lambda: spaces.Box(np.array(0.0, np.float32), np.array(1.0, np.float32)),
    "box-big-endian": lambda: spaces.Box(0.0, 1.0, (2,), dtype=">f8"),
    "box-empty": lambda: spaces.Box(0.0, 1.0, (0,)),
    "discrete": lambda: spaces.Discrete(5),
    "discrete-start": lambda: spaces.Discrete(3, start=-2),
    "discrete-uint8": pytest.param(lambda: spaces.Discrete(4, start=2, dtype=np.uint8), marks=needs_discrete_dtype),
    "multidiscrete": lambda: spaces.MultiDiscrete([3, 4, 5]),
    "multidiscrete-2d-start-int32": lambda: spaces.MultiDiscrete(
        np.array([[2, 3], [4, 5]]), dtype=np.int32, start=[[0, 1], [-1, 2]]
    ),
    "multibinary-int": lambda: spaces.MultiBinary(5),
    "multibinary-shape": lambda: spaces.MultiBinary([2, 3]),
    "dict-sorted": lambda: spaces.Dict({"b": spaces.Discrete(2), "a": spaces.Discrete(3)}),
    "dict-insertion-order": lambda: in_order({"b": spaces.Discrete(2), "a": spaces.Discrete(3)}),
    "dict-non-str-keys": lambda: in_order({(1, 2): spaces.Discrete(2), 7: spaces.Discrete(3)}),
    "dict-empty": lambda: spaces.Dict({}),
    "tuple": lambda: spaces.Tuple([spaces.Discrete(2), spaces.Box(0.0, 1.0, (2,))]),
    "nested-dict-tuple-dict": nested,
    "text": lambda: spaces.Text(10),
    "text-charset-set": lambda: spaces.Text(5, min_length=2, charset=set("cab!é")),
    "text-charset-ordered": lambda: spaces.Text(5, min_length=0, charset="zyx"),
    "sequence": lambda: spaces.Sequence(spaces.Discrete(4)),
    "sequence-stack": lambda: spaces.Sequence(spaces.Box(0.0, 1.0, (2,)), stack=True),
    "graph": lambda: spaces.Graph(spaces.Box(0.0, 1.0, (3,)), spaces.Discrete(4)),
    "graph-no-edges": lambda: spaces.Graph(spaces.Discrete(5), None),
    "oneof": pytest.param(
        lambda: spaces.OneOf([spaces.Discrete(2), spaces.Box(0.0, 1.0, (2,))]),
        marks=needs_oneof,
    ),
}


@pytest.mark.parametrize("make", SPACES.values(), ids=SPACES.keys())
def test_round_trip(make):
    space = make()
    body, decoded = json_round_trip(space)
    assert type(decoded) is type(space)
    assert decoded == space
    assert decoded.dtype == space.dtype
    # Encoding the decoded space gives the same body: nothing is lost or reordered.
    assert encode_space(decoded, enc) == body


@pytest.mark.parametrize("make", SPACES.values(), ids=SPACES.keys())
def test_seeded_space_samples_the_same(make):
    space = make()
    space.seed(42)
    space.sample()  # a generator mid-stream, not just freshly seeded
    _, decoded = json_round_trip(space)
    for _ in range(3):
        assert_same_value(decoded.sample(), space.sample())


@pytest.mark.parametrize(
    "bit_generator",
    [np.random.MT19937, np.random.Philox, np.random.SFC64, np.random.PCG64DXSM],
)
def test_other_bit_generators(bit_generator):
    space = spaces.Box(0.0, 1.0, (3,), seed=np.random.Generator(bit_generator(7)))
    space.sample()
    body, decoded = json_round_trip(space)
    assert body["rng"]["bit_generator"] == bit_generator.__name__
    assert type(decoded.np_random.bit_generator) is bit_generator
    np.testing.assert_array_equal(decoded.sample(), space.sample())


def test_sub_space_seeded_alone():
    child = spaces.Discrete(100, seed=3)
    space = spaces.Dict({"a": child, "b": spaces.Discrete(100)})
    body, decoded = json_round_trip(space)
    assert "rng" not in body
    assert "rng" in body["spaces"][0][1]
    assert "rng" not in body["spaces"][1][1]
    assert decoded["a"].sample() == child.sample()


def test_unseeded_space_stays_unseeded():
    body, decoded = json_round_trip(spaces.Box(0.0, 1.0, (2,)))
    assert "rng" not in body
    assert decoded._np_random is None


def test_big_rng_ints_are_decimal_strings():
    body = encode_space(spaces.Discrete(3, seed=1), enc)
    state = body["rng"]["state"]
    assert all(isinstance(v, str) and int(v) >= 2**63 for v in state.values())
    orjson.dumps(body)


def test_dict_keeps_key_order():
    _, decoded = json_round_trip(nested())
    assert list(decoded.spaces) == ["obs", "extra"]
    assert list(decoded["obs"][0].spaces) == ["z", "a"]
    assert getattr(decoded, "sort_keys", False) is False


def test_box_bounds_kept_exactly():
    space = spaces.Box(-np.inf, 5, (2,), dtype=np.int64)
    body, decoded = json_round_trip(space)
    assert body["dtype"] == "int64"
    assert body["bounded_below"]["data"] == [False, False]
    assert "bounded_above" not in body
    np.testing.assert_array_equal(decoded.low, space.low)
    np.testing.assert_array_equal(decoded.bounded_below, [False, False])
    np.testing.assert_array_equal(decoded.bounded_above, [True, True])


@pytest.mark.parametrize(
    ("dtype", "name"),
    [(np.float32, "float32"), (np.uint8, "uint8"), (bool, "bool"), (">f8", ">f8")],
)
def test_dtype_names(dtype, name):
    assert encode_space(spaces.Box(0, 1, (1,), dtype=dtype), enc)["dtype"] == name


def test_text_charset_body():
    space = spaces.Text(3, charset=set("cba"))
    body = encode_space(space, enc)
    # The order sampling draws from: gymnasium 1.x sorts a set, 0.29 takes the set's order.
    assert body == {"space": "Text", "max_length": 3, "min_length": 1, "charset": "".join(space.character_list)}
    if HAS_ONEOF:
        assert body["charset"] == "abc"


def test_graph_without_edge_space_body():
    body = encode_space(spaces.Graph(spaces.Discrete(2), None), enc)
    assert body["edge_space"] is None


@st.composite
def boxes(draw):
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64, np.int16, np.uint8])))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    if dtype.kind == "f":
        elements = st.floats(allow_nan=False, allow_infinity=False, width=dtype.itemsize * 8)
    else:
        elements = hnp.from_dtype(dtype)
    a = draw(hnp.arrays(dtype, shape, elements=elements))
    b = draw(hnp.arrays(dtype, shape, elements=elements))
    low = np.array(np.minimum(a, b), dtype=dtype)
    high = np.array(np.maximum(a, b), dtype=dtype)
    if dtype.kind == "f":
        low[draw(hnp.arrays(bool, shape))] = -np.inf
        high[draw(hnp.arrays(bool, shape))] = np.inf
    return spaces.Box(low, high, dtype=dtype)


@given(boxes())
def test_box_round_trip_property(space):
    _, decoded = json_round_trip(space)
    assert decoded == space
    assert decoded.dtype == space.dtype
    np.testing.assert_array_equal(decoded.low, space.low)
    np.testing.assert_array_equal(decoded.high, space.high)
    np.testing.assert_array_equal(decoded.bounded_below, space.bounded_below)
    np.testing.assert_array_equal(decoded.bounded_above, space.bounded_above)


# is_space


def test_is_space():
    assert is_space(spaces.Discrete(2))
    assert is_space(spaces.Dict({}))
    assert not is_space(2)
    assert not is_space(np.zeros(2))


def test_is_space_does_not_import_gymnasium():
    code = (
        "import sys; from zipsave._codec._spaces import is_space; "
        "before = 'gymnasium' in sys.modules; is_space(object()); "
        "assert ('gymnasium' in sys.modules) == before"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# Encode errors


class MySpace(spaces.Space):
    pass


class MyBox(spaces.Box):
    pass


def test_encode_unknown_space():
    with pytest.raises(
        EncodeError,
        match=re.escape(f"gymnasium space: `{__name__}.MySpace` has no native form"),
    ):
        encode_space(MySpace(), enc)


def test_encode_subclass_of_known_kind():
    with pytest.raises(EncodeError, match=re.escape(f"`{__name__}.MyBox` has no native form")):
        encode_space(MyBox(0.0, 1.0, (1,)), enc)


def test_encode_unknown_nested_names_path_and_key():
    space = spaces.Dict({"a": spaces.Tuple([spaces.Discrete(2), MySpace()])})
    with pytest.raises(EncodeError) as info:
        encode_space(space, enc, key="observation_space")
    assert info.value.key == "observation_space"
    assert "gymnasium space at `spaces['a'].spaces[1]`" in str(info.value)


def test_encode_foreign_generator():
    space = spaces.Discrete(2)
    space._np_random = np.random.RandomState(0)
    with pytest.raises(EncodeError, match=re.escape("is not a numpy Generator over one of")):
        encode_space(space, enc)


# Decode errors: each names the place, the field and what was expected.

DISCRETE = {"space": "Discrete", "n": 3, "start": 0, "dtype": "int64"}
BOX = encode_space(spaces.Box(0.0, 1.0, (2,)), enc)


def rejection(cls: type, *args: Any) -> str:
    """What gymnasium says when it refuses ``cls(*args)``, as a decode error quotes it."""
    try:
        cls(*args)
    except Exception as err:  # noqa: BLE001 - whatever this gymnasium raises
        return f"{type(err).__name__}: {str(err).rstrip('.')}."
    raise AssertionError(f"gymnasium accepted {cls.__name__}{args}")


def with_(body: dict, **changes: Any) -> dict:
    return {**body, **changes}


def without(body: dict, field: str) -> dict:
    return {k: v for k, v in body.items() if k != field}


DECODE_ERRORS = {
    "not-object": (
        [1, 2],
        "gymnasium space body: expected an object with a `space` field, got list [1, 2].",
    ),
    "no-kind": (
        {"n": 3},
        "gymnasium space body: field `space` is missing (expected one of Box, Dict, ",
    ),
    "unknown-kind": (
        {"space": "Circle"},
        (
            "gymnasium space body: field `space` must be one of Box, Dict, Discrete, Graph, "
            "MultiBinary, MultiDiscrete, OneOf, Sequence, Text, Tuple, got str 'Circle'."
        ),
    ),
    "missing-field": (
        without(DISCRETE, "start"),
        ("gymnasium space body: field `start` is missing (a Discrete body needs `dtype`, `n`, `start`)."),
    ),
    "int-as-string": (
        with_(DISCRETE, n="3"),
        "gymnasium space body: field `n` must be an int, got str '3'.",
    ),
    "bool-as-int": (
        with_(DISCRETE, start=True),
        "field `start` must be an int, got bool True.",
    ),
    "bad-dtype": (
        with_(DISCRETE, dtype="floaty"),
        "field `dtype` must be a numpy dtype name such as 'float32' or '<f4', got str 'floaty'.",
    ),
    "dtype-not-string": (
        with_(DISCRETE, dtype=7),
        "field `dtype` must be a numpy dtype name",
    ),
    "unexpected-field": (
        with_(DISCRETE, colour="red"),
        "unexpected field(s) `colour` in a Discrete body (allowed: `dtype`, `n`, `start`, `rng`).",
    ),
    "gymnasium-rejects": (
        with_(DISCRETE, n=0),
        # gymnasium's own words, which change between versions
        f"gymnasium space body: gymnasium rejected the Discrete fields: {rejection(spaces.Discrete, 0)}",
    ),
    "box-low-not-array": (
        with_(BOX, low=0.5),
        ("field `low` must decode to a numpy array of bool or int or uint or float values, got float 0.5."),
    ),
    "box-bad-shape": (
        with_(BOX, shape=[2, -1]),
        "field `shape` must be a list of non-negative ints, got list [2, -1].",
    ),
    "box-low-above-high": (
        with_(BOX, low=enc(f32(2.0, 2.0))),
        f"gymnasium rejected the Box fields: {rejection(spaces.Box, f32(2.0, 2.0), f32(1.0, 1.0), (2,))}",
    ),
    "box-mask-shape": (
        with_(BOX, bounded_below=enc(np.array([True]))),
        "field `bounded_below` must have the Box shape (2,), got shape (1,).",
    ),
    "multibinary-n": (
        {"space": "MultiBinary", "n": [2, "3"]},
        "field `n` must be an int or a list of ints, got list [2, '3'].",
    ),
    "text-charset": (
        {"space": "Text", "max_length": 3, "min_length": 1, "charset": ["a", "b"]},
        "field `charset` must be a string of characters, got list ['a', 'b'].",
    ),
    "sequence-stack": (
        {"space": "Sequence", "feature_space": DISCRETE, "stack": "no"},
        "field `stack` must be true or false, got str 'no'.",
    ),
    "dict-not-pairs": (
        {"space": "Dict", "spaces": {"a": DISCRETE}, "sort_keys": True},
        "field `spaces` must be a list, got dict {'a': ",
    ),
    "dict-bad-pair": (
        {"space": "Dict", "spaces": [["a"]], "sort_keys": True},
        "field `spaces` must hold [key, space] pairs, item 0 is list ['a'].",
    ),
    "dict-duplicate-key": (
        {
            "space": "Dict",
            "spaces": [["a", DISCRETE], ["a", DISCRETE]],
            "sort_keys": True,
        },
        "field `spaces` repeats the key 'a'.",
    ),
    "dict-child": (
        {
            "space": "Dict",
            "spaces": [["obs", with_(DISCRETE, n=None)]],
            "sort_keys": True,
        },
        "gymnasium space body at `spaces['obs']`: field `n` must be an int, got NoneType None.",
    ),
    "deep-child": (
        {
            "space": "Tuple",
            "spaces": [
                DISCRETE,
                {"space": "Graph", "node_space": {"space": "Box"}, "edge_space": None},
            ],
        },
        "gymnasium space body at `spaces[1].node_space`: field `dtype` is missing",
    ),
    "oneof-empty": pytest.param(
        {"space": "OneOf", "spaces": []},
        "gymnasium rejected the OneOf fields: ValueError: Empty `OneOf` spaces are not supported.",
        marks=needs_oneof,
    ),
    "rng-unknown-generator": (
        with_(DISCRETE, rng={"bit_generator": "os.system"}),
        (
            "field `rng` must be an object whose `bit_generator` is one of MT19937, PCG64, "
            "PCG64DXSM, Philox, SFC64, got dict {'bit_generator': 'os.system'}."
        ),
    ),
    "rng-missing-field": (
        with_(DISCRETE, rng={"bit_generator": "PCG64", "state": {"state": 1, "inc": 1}}),
        (
            "field `rng` must have exactly the fields `bit_generator`, `state`, `has_uint32`, "
            "`uinteger`; `has_uint32`, `uinteger` missing or unexpected."
        ),
    ),
    "rng-bad-int": (
        with_(
            DISCRETE,
            rng={
                "bit_generator": "PCG64",
                "state": {"state": "12a", "inc": 1},
                "has_uint32": 0,
                "uinteger": 0,
            },
        ),
        "field `rng.state.state` must be an int or a decimal string, got str '12a'.",
    ),
    "rng-bad-array": (
        with_(
            DISCRETE,
            rng={
                "bit_generator": "MT19937",
                "state": {"key": enc(np.zeros(3, np.uint32)), "pos": 0},
            },
        ),
        "field `rng.state.key` must decode to an integer array of shape (624,), got ndarray",
    ),
}


@pytest.mark.parametrize(("body", "message"), DECODE_ERRORS.values(), ids=DECODE_ERRORS.keys())
def test_decode_errors(body, message):
    with pytest.raises(DecodeError, match=re.escape(message)):
        decode_space(body, dec)


def test_decode_error_carries_key():
    with pytest.raises(DecodeError) as info:
        decode_space({"space": "Circle"}, dec, key="action_space")
    assert info.value.key == "action_space"
    assert str(info.value).startswith("key `action_space`: gymnasium space body: ")


def test_codec_failure_is_translated():
    def broken(value):
        raise KeyError("dtype")

    with pytest.raises(
        DecodeError,
        match=re.escape("field `low` could not be decoded: KeyError: 'dtype'"),
    ) as info:
        decode_space(BOX, broken)
    assert isinstance(info.value.__cause__, KeyError)


def test_codec_decode_error_passes_through():
    def refuses(value):
        raise DecodeError("array member `arrays/1.npy` is missing")

    with pytest.raises(DecodeError, match=re.escape("array member `arrays/1.npy` is missing")):
        decode_space(BOX, refuses)


# Across gymnasium versions: bodies as gymnasium 1.4 writes them, read on the installed one
# (CI runs this file on gymnasium 0.29 too: see .ci/run).

DISCRETE_UINT8 = {"space": "Discrete", "n": 4, "start": 2, "dtype": "uint8"}
ONEOF = {"space": "OneOf", "spaces": [DISCRETE, BOX]}
UNSORTED_DICT = {
    "space": "Dict",
    "spaces": [["b", DISCRETE], ["a", BOX]],
    "sort_keys": False,
}


def test_default_discrete_dtype_reads_on_every_gymnasium():
    decoded = decode_space(with_(DISCRETE, start=-1), dec)
    assert decoded == spaces.Discrete(3, start=-1)
    assert decoded.dtype == np.int64
    assert encode_space(decoded, enc) == with_(DISCRETE, start=-1)


@pytest.mark.parametrize("sort_keys", [True, False])
def test_dict_order_reads_on_every_gymnasium(sort_keys):
    body = with_(UNSORTED_DICT, sort_keys=sort_keys)
    decoded = decode_space(body, dec)
    assert list(decoded.spaces) == ["b", "a"]
    assert decoded["a"] == decode_space(BOX, dec)
    if HAS_SORT_KEYS:
        assert decoded.sort_keys is sort_keys
        assert encode_space(decoded, enc) == body
    else:  # no such attribute: the order, which is all it meant, is kept
        assert encode_space(decoded, enc) == with_(body, sort_keys=True)


def test_dict_written_on_old_gymnasium_is_sorted_like_sort_keys_true():
    # A mapping sorted on every gymnasium, so the same body everywhere.
    body = encode_space(spaces.Dict({"b": spaces.Discrete(2), "a": spaces.Discrete(3)}), enc)
    assert [name for name, _ in body["spaces"]] == ["a", "b"]
    assert body["sort_keys"] is True


def test_discrete_dtype_on_this_gymnasium():
    body = {"space": "Tuple", "spaces": [DISCRETE, DISCRETE_UINT8]}
    if HAS_DISCRETE_DTYPE:
        decoded = decode_space(body, dec, written_with="1.4.0")
        assert decoded[1] == spaces.Discrete(4, start=2, dtype=np.uint8)
        return
    with pytest.raises(DecodeError) as info:
        decode_space(body, dec, key="action_space", written_with="1.4.0")
    assert str(info.value) == (
        "key `action_space`: gymnasium space body at `spaces[1]`: field `dtype` of the Discrete "
        "space is uint8, which the installed gymnasium cannot represent: its Discrete has no "
        f"`dtype` argument and always uses int64. It was written with gymnasium 1.4.0; gymnasium "
        f"{GYM} is installed here. Load it with a gymnasium that has this Discrete field (such "
        "as the version that wrote it)."
    )


def test_oneof_on_this_gymnasium():
    body = {"space": "Dict", "spaces": [["choice", ONEOF]], "sort_keys": True}
    if HAS_ONEOF:
        decoded = decode_space(body, dec, written_with="1.4.0")
        assert type(decoded["choice"]) is spaces.OneOf
        assert encode_space(decoded, enc) == body
        return
    with pytest.raises(DecodeError) as info:
        decode_space(body, dec, key="observation_space", written_with="1.4.0")
    assert str(info.value) == (
        "key `observation_space`: gymnasium space body at `spaces['choice']`: field `space` is "
        "OneOf, a kind of space that the installed gymnasium does not have. It was written with "
        f"gymnasium 1.4.0; gymnasium {GYM} is installed here. Load it with a gymnasium that has "
        "this OneOf kind (such as the version that wrote it)."
    )


def test_writer_version_is_asked_only_for_an_error():
    asked = []

    def written_with() -> str:
        asked.append(True)
        return "1.4.0"

    decode_space(DISCRETE, dec, written_with=written_with)
    assert asked == []
    with pytest.raises(
        DecodeError,
        match=re.escape(f"It was written with gymnasium 1.4.0; gymnasium {GYM} is installed here."),
    ):
        decode_space(with_(DISCRETE, n=0), dec, written_with=written_with)
    assert asked == [True]


def test_unknown_writer_version_is_said():
    with pytest.raises(
        DecodeError,
        match=re.escape(f"gymnasium {GYM} is installed here; the archive does not record which gymnasium wrote it."),
    ):
        decode_space(with_(DISCRETE, n=0), dec)


def test_load_names_the_gymnasium_from_system_info(tmp_path):
    """The version in an error comes from the archive's system_info.txt, through a load."""
    import zipfile

    import zipsave

    zipsave.save({"action_space": spaces.Discrete(3), "step": 1}, tmp_path / "ok.zip")
    edited = tmp_path / "edited.zip"
    with zipfile.ZipFile(tmp_path / "ok.zip") as src, zipfile.ZipFile(edited, "w") as dst:
        info = dict(line.split(": ", 1) for line in src.read("system_info.txt").decode().splitlines())
        for item in src.infolist():
            raw = src.read(item)
            if item.filename == "data":
                raw = raw.replace(b'"n": 3', b'"n": 0')  # a body gymnasium rejects
            dst.writestr(item, raw)
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.ZipsaveWarning):
        zipsave.load_archive(edited, report=report)
    [skipped] = report.skipped
    assert skipped.key == "action_space"
    assert f"It was written with gymnasium {info['- Gymnasium']}; gymnasium {GYM} is installed" in skipped.cause


def test_a_space_stands_for_samples_of_bounded_size(tmp_path):
    # A few bytes stood for samples of any size: MultiBinary([10**6, 10**6]).sample() asked for
    # 931 GiB, Text(10**12) for 4.6 TiB. Refused natively and pickled; real sizes load.
    import base64
    import json
    import pickle
    import zipfile

    from gymnasium.spaces import MultiBinary, Text

    import zipsave

    def native(**body):
        return {":type:": "x", ":zipsave:": {"kind": "space", **body}}

    def pickled(space):
        return {":type:": "x", ":serialized:": base64.b64encode(pickle.dumps(space)).decode()}

    data = {
        "mb": native(space="MultiBinary", n=[10**6, 10**6]),
        "text": native(space="Text", max_length=10**12, min_length=0, charset="ab"),
        "mb_pickled": pickled(MultiBinary([10**6, 10**6])),
        "text_pickled": pickled(Text(10**12, charset="ab")),
        "mb_ok": native(space="MultiBinary", n=[4, 5]),
        "text_ok": pickled(Text(100, charset="ab")),
    }
    path = tmp_path / "big-samples.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", json.dumps(data))
    with pytest.warns(zipsave.SkippedEntryWarning, match="stands for samples of more than") as caught:
        model = zipsave.load(path)
    assert sorted(model) == ["mb_ok", "text_ok"]
    assert len([w for w in caught if "stands for samples" in str(w.message)]) == 4
    assert model["mb_ok"].sample().shape == (4, 5)


def test_a_text_charset_holds_no_character_a_terminal_acts_on(tmp_path):
    # gymnasium's repr shows the charset as it is: printing a loaded model wrote the archive's
    # escape sequences and bidi overrides to the terminal. Tabs and newlines stay allowed.
    import base64
    import json
    import pickle
    import zipfile

    from gymnasium.spaces import Text

    import zipsave

    body = {"kind": "space", "space": "Text", "max_length": 3, "min_length": 1}
    data = {
        "native": {":type:": "x", ":zipsave:": {**body, "charset": "ab\x1b]0;title\x07\u202e"}},
        "pickled": {":type:": "x", ":serialized:": base64.b64encode(pickle.dumps(Text(3, charset="a\x9b"))).decode()},
        "fine": {":type:": "x", ":zipsave:": {**body, "charset": "ab \t\n"}},
    }
    path = tmp_path / "charset.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", json.dumps(data))
    with pytest.warns(zipsave.SkippedEntryWarning, match="a terminal acts on"):
        model = zipsave.load(path)
    assert list(model) == ["fine"]


def test_a_space_holds_only_values_its_dtype_and_gymnasium_accept(tmp_path):
    # Discrete(2**63 - 1, start=2**63 - 1) is built by gymnasium, but start + n - 1 is past
    # int64: sample() overflowed (a RuntimeWarning and a negative sample). MultiDiscrete wrapped
    # silently. A pickled Box skips the constructor that refuses NaN bounds and low > high.
    # Each is refused, native and pickled, naming its key; what gymnasium can use still loads.
    import base64
    import json
    import pickle
    import warnings
    import zipfile

    import zipsave

    def native(**body):
        return {":type:": "x", ":zipsave:": {"kind": "space", **body}}

    def pickled(space):
        return {":type:": "x", ":serialized:": base64.b64encode(pickle.dumps(space)).decode()}

    def box(**changed):
        space = spaces.Box(-1.0, 1.0, (2,))
        for name, (index, value) in changed.items():
            getattr(space, name)[index] = value
        return space

    def changed(space, **attributes):
        vars(space).update(attributes)
        return space

    top = 2**63 - 1
    bad = {
        "discrete_past_int64": native(space="Discrete", n=top, start=top, dtype="int64"),
        "discrete_past_int64_pickled": pickled(spaces.Discrete(top, start=top)),
        "discrete_end_past_int64": pickled(spaces.Discrete(1, start=top)),  # 0.29's contains adds n
        "multidiscrete_past_uint8": pickled(spaces.MultiDiscrete([10], dtype=np.uint8, start=[250])),
        "multidiscrete_past_int64": pickled(spaces.MultiDiscrete([2, 2**62], start=[0, 2**62 + 1])),
        "box_nan_pickled": pickled(box(low=(0, np.nan))),
        "box_low_above_high_pickled": pickled(box(low=(1, 3.0))),
        "box_infinite_bound_marked_bounded": pickled(box(low=(0, -np.inf))),
        "multibinary_empty_dimension": pickled(changed(spaces.MultiBinary([2, 3]), _shape=(2, 0))),
        "text_min_above_max": pickled(changed(spaces.Text(5, min_length=1, charset="ab"), min_length=6)),
    }
    good = {
        "discrete_top": pickled(spaces.Discrete(1, start=top - 1)),
        "discrete_wide": native(space="Discrete", n=top, start=0, dtype="int64"),
        "discrete_bottom": pickled(spaces.Discrete(3, start=-(2**63))),
        "multidiscrete_top": pickled(spaces.MultiDiscrete([2, 2**62], start=[0, 2**62 - 1])),
        "multidiscrete_uint8": pickled(spaces.MultiDiscrete([10], dtype=np.uint8, start=[246])),
        "box_unbounded": pickled(spaces.Box(-np.inf, np.inf, (2,))),
        "box_int_unbounded_below": pickled(spaces.Box(-np.inf, 5, (2,), dtype=np.int64)),
    }
    path = tmp_path / "spaces.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", json.dumps({**bad, **good}))
    with pytest.warns(zipsave.SkippedEntryWarning) as caught:
        model = zipsave.load(path)
    assert sorted(model) == sorted(good)
    assert sorted(str(w.message).split("`")[3] for w in caught) == sorted(bad), [str(w.message) for w in caught]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow in sample() would be a RuntimeWarning
        for key, space in model.items():
            for _ in range(20):
                assert space.contains(space.sample()), key
    for key in bad:
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("data", json.dumps({key: bad[key]}))
        with pytest.raises(DecodeError) as raised:
            zipsave.load(path, strict=True)
        assert raised.value.key == key


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_a_0d_box_decodes_with_the_attribute_types_a_pickle_gives(dtype):
    # Box(-1, 1, ()) holds 0-d arrays as its masks; rebuilt from its 0-d bounds, gymnasium
    # compared them to a numpy bool (np.True_), which is what zipsave returned, unlike a pickle
    import pickle

    space = spaces.Box(-1, 1, (), dtype)
    body, back = json_round_trip(space)
    expected = pickle.loads(pickle.dumps(space))
    for name in ("low", "high", "bounded_below", "bounded_above"):
        # 0-d arrays on gymnasium 1.x; numpy bools for the masks on 0.29, as it builds them
        assert type(getattr(back, name)) is type(getattr(expected, name)), name
        assert getattr(back, name).dtype == getattr(expected, name).dtype, name
    assert back == expected
