"""The bounded unpickler's reads (``zipsave._trust._bounded``): an operand that claims more
bytes than remain is refused with zipsave's message, never read short, from bytes or a file,
inside a frame or outside; values equal pickle's own for protocols 0-5; and every truncation
ends as it ends under pickle's own ``load`` over the same exact input."""

from __future__ import annotations

import io
import pickle
import re
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zipsave._trust import BoundedUnpickler
from zipsave._trust._prescan import prescan_pickle
from zipsave.exceptions import ArchiveLimitError, DecodeError

_P2, _P4 = b"\x80\x02", b"\x80\x04"


class _PicklesOwnLoad(BoundedUnpickler):
    """The same unpickler run by pickle's own ``load``: pickle's unframer over ``_Exact``,
    two Python calls per read, as every read went before ``BoundedUnpickler.load``."""

    load = pickle._Unpickler.load  # type: ignore[attr-defined]


def _outcome(cls: type, source: Any, loads: int = 1) -> list:
    out: list = []
    try:
        unpickler = cls(source)
        for _ in range(loads):
            out.append(("value", unpickler.load()))
    except Exception as err:
        out.append((type(err).__name__, str(err)))
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (``b"a" == bytearray(b"a")`` is not enough)."""
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(map(_same, a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(_same(v, b[k]) for k, v in a.items())
    return bool(a == b)


def _sources(payload: bytes) -> list:
    return [payload, bytearray(payload), memoryview(payload), io.BytesIO(payload)]


# Each opcode with an operand, cut inside it: (payload, bytes asked, bytes left).
TRUNCATED = {
    "SHORT_BINBYTES": (_P4 + b"C\x05abc", 5, 3),
    "SHORT_BINBYTES-length": (_P4 + b"C", 1, 0),
    "BINBYTES": (_P4 + b"B" + struct.pack("<I", 10) + b"abc", 10, 3),
    "BINBYTES-length": (_P4 + b"B\x0a\x00", 4, 2),
    "BINBYTES8": (_P4 + b"\x8e" + struct.pack("<Q", 10) + b"abc", 10, 3),
    "BINBYTES8-length": (_P4 + b"\x8e\x0a\x00\x00", 8, 3),
    "BINBYTES8-huge": (_P4 + b"\x8e" + struct.pack("<Q", 1 << 62) + b"abc", 1 << 62, 3),
    "BINUNICODE": (_P2 + b"X" + struct.pack("<I", 10) + b"abc", 10, 3),
    "BINUNICODE-huge": (_P2 + b"X" + struct.pack("<I", 0xFFFFFFFF) + b"abc", 0xFFFFFFFF, 3),
    "SHORT_BINUNICODE": (_P4 + b"\x8c\x0aabc", 10, 3),
    "BINUNICODE8": (_P4 + b"\x8d" + struct.pack("<Q", 10) + b"abc", 10, 3),
    "SHORT_BINSTRING": (_P2 + b"U\x0aabc", 10, 3),
    "BINSTRING": (_P2 + b"T" + struct.pack("<i", 10) + b"abc", 10, 3),
    "LONG1": (_P2 + b"\x8a\x05ab", 5, 2),
    "LONG4": (_P2 + b"\x8b" + struct.pack("<i", 10) + b"ab", 10, 2),
    "FRAME": (_P4 + b"\x95" + struct.pack("<Q", 20) + b"N.", 20, 2),
    "FRAME-length": (_P4 + b"\x95\x14", 8, 1),
    "BYTEARRAY8": (_P4 + b"\x96" + struct.pack("<Q", 12) + b"abc", 12, 3),
    "BININT": (_P2 + b"J\x01\x02", 4, 2),
    "BININT1": (_P2 + b"K", 1, 0),
    "BININT2": (_P2 + b"M\x01", 2, 1),
    "BINFLOAT": (_P2 + b"G\x00\x00\x00", 8, 3),
    "BINGET": (_P2 + b"h", 1, 0),
    "LONG_BINGET": (_P2 + b"j\x00\x00", 4, 2),
    "BINPUT": (_P2 + b"Nq", 1, 0),
    "LONG_BINPUT": (_P2 + b"Nr\x00", 4, 1),
    "PROTO": (b"\x80", 1, 0),
    "EXT1": (_P2 + b"\x82", 1, 0),
    "EXT2": (_P2 + b"\x83\x01", 2, 1),
    "EXT4": (_P2 + b"\x84\x01\x02\x03", 4, 3),
    "no-STOP": (_P2 + b"N", 1, 0),
    "empty": (b"", 1, 0),
}


@pytest.mark.parametrize("name", sorted(TRUNCATED))
def test_an_operand_past_the_end_is_refused_not_read_short(name):
    payload, asked, left = TRUNCATED[name]
    message = f"the pickle asks for {asked} bytes where {left} remain"
    for source in _sources(payload):
        with pytest.raises(pickle.UnpicklingError, match=re.escape(message)):
            BoundedUnpickler(source).load()
        if isinstance(source, io.BytesIO):
            source.seek(0)
        assert _outcome(BoundedUnpickler, source) == [("UnpicklingError", message)]
    with pytest.raises(DecodeError, match=re.escape(message)):
        prescan_pickle(payload)


@pytest.mark.parametrize("name", sorted(set(TRUNCATED) - {"PROTO", "empty", "FRAME", "FRAME-length"}))
def test_an_operand_past_the_end_of_its_frame_is_refused(name):
    # the cut opcode inside a frame that holds exactly the bytes left: pickle's unframer refuses
    # a read past the frame, or, at its very end, reads on to the end of the pickle and is refused
    payload, asked, _ = TRUNCATED[name]
    rest = payload[2:]
    framed = _P4 + b"\x95" + struct.pack("<Q", len(rest)) + rest
    before = _outcome(_PicklesOwnLoad, framed)
    assert before[0][0] == "UnpicklingError", before
    assert re.fullmatch(
        rf"pickle exhausted before end of frame|the pickle asks for {asked} bytes where 0 remain", before[0][1]
    )
    for source in _sources(framed):
        assert _outcome(BoundedUnpickler, source) == before


HOSTILE = {
    "BINSTRING-negative": _P2 + b"T" + struct.pack("<i", -5) + b"abc.",
    "LONG4-negative": _P2 + b"\x8b" + struct.pack("<i", -5) + b"abc.",
    "BINBYTES8-past-maxsize": _P4 + b"\x8e" + struct.pack("<Q", (1 << 64) - 1) + b"abc.",
    "BINUNICODE8-past-maxsize": _P4 + b"\x8d" + struct.pack("<Q", 1 << 63) + b"abc.",
    "BYTEARRAY8-past-the-pickle": _P4 + b"\x96" + struct.pack("<Q", 1 << 40) + b"abc.",
    "FRAME-past-maxsize": _P4 + b"\x95" + struct.pack("<Q", (1 << 64) - 1) + b"N.",
    "FRAME-in-a-frame": _P4 + b"\x95" + struct.pack("<Q", 11) + b"\x95" + struct.pack("<Q", 2) + b"NN.",
    "operand-across-a-frame-end": _P4 + b"\x95" + struct.pack("<Q", 3) + b"C\x03a" + b"bc.",
    "GLOBAL-without-newline": _P2 + b"cbuiltins\nlen",
    "BINGET-unknown": _P2 + b"h\x07.",
    "unknown-opcode": _P2 + b"\xff.",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_lengths_and_frames_are_refused_as_under_pickles_own_load(name):
    payload = HOSTILE[name]
    before = _outcome(_PicklesOwnLoad, payload)
    assert before[0][0] != "value", before
    for source in _sources(payload):
        assert _outcome(BoundedUnpickler, source) == before
    with pytest.raises(DecodeError):
        prescan_pickle(payload)


_BENIGN: list = [
    None,
    True,
    {"a": [1, -2, 2**40, -(2**70), 3.5, "x" * 300, b"y" * 300, bytearray(b"z")], ("t", 1): {1, 2}, 7: frozenset("ab")},
    [[], (), {}, "", b"", 0, 0.0, -0.0, 1e300, "é\U0001f600", (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)],
    {"big": b"\x00" * 70_000, "arr": bytearray(70_000), "after": list(range(300)), "text": "t" * 70_000},
]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("index", range(len(_BENIGN)))
def test_values_equal_pickles_own_from_bytes_and_from_a_file(index, protocol):
    value = _BENIGN[index]
    payload = pickle.dumps(value, protocol=protocol)
    for source in _sources(payload):
        assert _same(BoundedUnpickler(source).load(), pickle.loads(payload))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_consecutive_pickles_load_one_by_one_then_the_end_is_refused(protocol):
    values = [_BENIGN[2], _BENIGN[4], None]
    payload = b"".join(pickle.dumps(v, protocol=protocol) for v in values)
    for source in _sources(payload):
        out = _outcome(BoundedUnpickler, source, loads=4)
        assert [kind for kind, _ in out] == ["value"] * 3 + ["UnpicklingError"]
        assert all(_same(got, want) for (_, got), want in zip(out, values))
        assert out[3][1] == "the pickle asks for 1 bytes where 0 remain"


def _cuts(size: int) -> list[int]:
    return sorted({*range(min(size, 400)), *range(max(0, size - 400), size + 1), *range(0, size, 997)})


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("index", range(len(_BENIGN)))
def test_every_truncation_ends_as_under_pickles_own_load(index, protocol):
    payload = pickle.dumps(_BENIGN[index], protocol=protocol)
    for cut in _cuts(len(payload)):
        before = _outcome(_PicklesOwnLoad, payload[:cut])
        for source in (payload[:cut], io.BytesIO(payload[:cut])):
            assert _outcome(BoundedUnpickler, source) == before, (cut, before)


_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=300)
    | st.binary(max_size=20).map(bytearray)
)
_KEYS = st.integers() | st.text(max_size=8)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.lists(inner, max_size=6).map(tuple)
        | st.dictionaries(_KEYS, inner, max_size=6)
        | st.frozensets(_KEYS, max_size=6)
        | st.sets(_KEYS, max_size=6)
    ),
    max_leaves=30,
)


@settings(max_examples=150)
@given(value=_VALUES, protocol=st.integers(0, pickle.HIGHEST_PROTOCOL), cut=st.integers(0, 1 << 16))
def test_any_value_and_any_cut_of_it_match_pickles_own_load(value, protocol, cut):
    payload = pickle.dumps(value, protocol=protocol)
    for source in (payload, io.BytesIO(payload)):
        assert _same(BoundedUnpickler(source).load(), pickle.loads(payload))
    cut %= len(payload) + 1
    before = _outcome(_PicklesOwnLoad, payload[:cut])
    for source in (payload[:cut], io.BytesIO(payload[:cut])):
        assert _outcome(BoundedUnpickler, source) == before


def test_load_sets_the_state_pickles_own_load_sets():
    # BoundedUnpickler.load replaces pickle's: what a later CPython's sets must be set here too
    payload = pickle.dumps({"a": [1, 2]}, protocol=4)
    theirs = pickle._Unpickler(io.BytesIO(payload))  # type: ignore[attr-defined]
    theirs.load()
    ours = BoundedUnpickler(payload)
    ours.load()
    assert set(vars(theirs)) <= set(vars(ours))


# -- memo slots -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "put", [b"r\xff\xff\xff\x3f", b"p1073741823\n", b"r\x0a\x00\x00\x00"], ids=["long", "text", "past"]
)
def test_a_memo_slot_past_the_pickle_is_refused(put):
    # C's unpickler (DCP's metadata, SB3's schedule recogniser, after this pre-scan) grows its
    # memo to twice the slot written: slot 2**30 - 1 from a 10-byte pickle took 16 GB.
    payload = b"\x80\x02N" + put + b"."
    with pytest.raises(ArchiveLimitError, match=re.escape(f"past its {len(payload)} bytes")):
        prescan_pickle(payload)


@pytest.mark.parametrize("protocol", range(6))
def test_what_picklers_write_keeps_its_memo_within_its_size(protocol):
    import collections

    import cloudpickle
    import torch

    shared = [1.5, "x"]
    value = {"a": shared, "b": shared, "d": collections.OrderedDict(k=(shared, shared)), "f": lambda x: x + 1}
    for payload in (cloudpickle.dumps(value, protocol=protocol), pickle.dumps([shared] * 3, protocol=protocol)):
        prescan_pickle(payload)
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(3), "v": torch.ones(2)}, buf)
    prescan_pickle(_data_pkl(buf.getvalue()), {"0": 12, "1": 8})


def _data_pkl(archive: bytes) -> bytes:
    import zipfile

    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))
