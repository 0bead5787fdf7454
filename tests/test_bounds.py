"""zipsave._bounds: the checks that keep decoded containers linear in their input."""

from __future__ import annotations

import re
import sys
import zipfile

import pytest

import zipsave
from zipsave._bounds import (
    MAX_INT_BITS,
    MAX_SAME_HASH,
    AllocBudget,
    KeyGuard,
    alloc_budget,
    check_int,
    check_size,
    check_zip_infos,
)
from zipsave.exceptions import ArchiveLimitError

MODULUS = (1 << 61) - 1


def test_colliding_keys_are_refused_at_the_first_past_the_limit():
    guard = KeyGuard(1 << 20)
    target: dict = {}
    for k in range(MAX_SAME_HASH):
        guard.add(target, 7 + k * MODULUS)
    with pytest.raises(ArchiveLimitError, match=re.escape(f"more than {MAX_SAME_HASH} distinct keys")):
        guard.add(target, 7 + MAX_SAME_HASH * MODULUS)


def test_equal_keys_and_other_containers_are_not_collisions():
    guard = KeyGuard(1 << 20)
    guard.items_of([0.5] * 1000)  # equal values given to set(): fine
    for k in range(MAX_SAME_HASH):  # each container counts its own keys
        guard.add(object(), 7 + k * MODULUS)
        guard.add(object(), 7 + k * MODULUS)


def test_a_key_built_from_shared_parts_is_charged_for_every_element():
    key: tuple = (1, 2)
    for _ in range(70):
        key = (key, key)  # 2**71 leaves, a few hundred bytes of pickle
    with pytest.raises(ArchiveLimitError, match="take more work to hash than its size allows"):
        KeyGuard(1 << 16).add({}, key)


def test_integer_and_size_limits():
    assert check_int(1 << (MAX_INT_BITS - 1)) == 1 << (MAX_INT_BITS - 1)
    with pytest.raises(ArchiveLimitError, match=re.escape(f"more than the {MAX_INT_BITS} a decoded integer may have")):
        check_int(1 << MAX_INT_BITS, key="k")
    with pytest.raises(ArchiveLimitError, match=re.escape("`bytes(9)` asks for 9 bytes or elements, more than the 8")):
        check_size(9, 8, "`bytes(9)`")


def test_a_save_judges_state_dict_integers_by_the_readers_own_limit():
    # `_pth_write` writes the limit out (a save imports no reader bounds); it must be the same
    from zipsave._tensors import _pth_write

    assert _pth_write._MAX_INT_BITS == MAX_INT_BITS


def test_a_nested_member_declaring_more_than_its_ratio_is_a_bomb():
    info = zipfile.ZipInfo("archive/data/0")
    info.compress_type, info.compress_size, info.file_size = zipfile.ZIP_DEFLATED, 1000, 4 << 30
    with pytest.raises(ArchiveLimitError, match=re.escape("expands 4294967x when decompressed; the limit is 200x")):
        check_zip_infos([info], size=2000, max_bytes=1 << 40, max_ratio=200.0)
    info.file_size = 1 << 20  # within the ratio and the total
    check_zip_infos([info], size=2000, max_bytes=1 << 40, max_ratio=2000.0)
    with pytest.raises(ArchiveLimitError, match="members total 1048576 bytes; the limit is 1000"):
        check_zip_infos([info], size=2000, max_bytes=1000, max_ratio=2000.0)


def test_the_allocation_budget_adds_every_request_up():
    budget = AllocBudget(1000, key="k")
    assert budget.total == (64 << 20) + 16 * 1000
    budget.charge(40 << 20, "`bytes(41943040)`")
    with pytest.raises(
        ArchiveLimitError,
        match=re.escape(
            "`bytes(41943040)` asks for 41943040 bytes, and this value may allocate 67124864 in all (41943040 already)"
        ),
    ) as info:
        budget.charge(40 << 20, "`bytes(41943040)`")  # each alone is within the budget; together they are not
    assert info.value.key == "k" and "`limits=zipsave.Limits(alloc_ratio=...)`" in str(info.value)


def test_the_allocation_budget_follows_limits():
    limits = zipsave.Limits(alloc_floor=10, alloc_ratio=2.5)
    assert alloc_budget(100, limits) == 260
    assert AllocBudget(100, limits).total == 260
    assert alloc_budget(100) == (64 << 20) + 1600


@pytest.mark.skipif(not hasattr(sys, "set_int_max_str_digits"), reason="Python < 3.11 has no digit limit to lift")
def test_json_integers_are_bounded_where_python_no_longer_bounds_them(tmp_path):
    # A program may lift Python's limit on integer text (4 300 digits); zipsave's bound (2**17
    # bits) then still holds: a 2 MB literal in `data` took 24 s to parse and loaded.
    import json

    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        path = tmp_path / "big-int.zip"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("data", '{"lr": 0.1, "n": ' + "7" * 50_000 + "}")
        with pytest.raises(zipsave.ZipsaveError, match="an integer of 50000 digits"):
            zipsave.load(path)
        # a random generator's state, given as decimal strings, is bounded alike
        space = {"space": "Discrete", "n": 3, "start": 0, "dtype": "int64"}
        rng = {"bit_generator": "PCG64", "state": {"state": "9" * 50_000, "inc": "1"}, "has_uint32": 0, "uinteger": 0}
        with zipfile.ZipFile(tmp_path / "rng.zip", "w") as zf:
            zf.writestr("data", json.dumps({"s": {":type:": "x", ":zipsave:": {"kind": "space", **space, "rng": rng}}}))
        with pytest.warns(zipsave.SkippedEntryWarning, match="must be an int or a decimal string"):
            assert "s" not in zipsave.load(tmp_path / "rng.zip")
    finally:
        sys.set_int_max_str_digits(previous)


@pytest.mark.parametrize("text", ["1E+999999999", "-1e39456", "1E-999999999", "5E-39457", "1" * 9000 + "E+31000"])
def test_a_decimal_stands_for_an_integer_of_bounded_size(tmp_path, text):
    # Decimal("1E+999999999") is a few bytes, but int() of it builds a 3.3-billion-bit integer
    # (int(Decimal("1E+999999")) alone takes 50 s), as_integer_ratio() of 1E-999999999 too:
    # held to the digits of an integer zipsave builds (MAX_INT_DIGITS), before and after the point.
    import decimal
    import json

    from zipsave._bounds import MAX_INT_DIGITS

    def native(value):
        return {":type:": "<class 'decimal.Decimal'>", ":zipsave:": {"kind": "decimal", "value": value}}

    digits = MAX_INT_DIGITS - 1  # 10**39456 < 2**MAX_INT_BITS
    edge = {"top": f"9.9E+{digits - 1}", "bottom": f"1E-{digits}", "nan": "NaN", "inf": "-Infinity"}
    path = tmp_path / "decimal.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", json.dumps({"d": native(text), **{k: native(v) for k, v in edge.items()}}))
    with pytest.warns(zipsave.SkippedEntryWarning, match=r"skipped key `d`.*stands for an integer of more than"):
        loaded = zipsave.load(path)
    assert sorted(loaded) == sorted(edge)
    assert int(loaded["top"]).bit_length() <= MAX_INT_BITS and loaded["bottom"].as_integer_ratio()[0] == 1
    assert str(loaded["nan"]) == "NaN" and loaded["inf"] == decimal.Decimal("-Infinity")
    with pytest.raises(
        zipsave.ArchiveLimitError,
        match=re.escape(f"exponent is at least -{digits} and its adjusted exponent at most {digits - 1}."),
    ):
        zipsave.load(path, strict=True)


@pytest.mark.skipif(not hasattr(sys, "set_int_max_str_digits"), reason="Python < 3.11 has no digit limit to lift")
@pytest.mark.parametrize(
    "raw",
    [b"I" + b"7" * 50_000 + b"\n.", b"L" + b"7" * 50_000 + b"L\n.", b"cbuiltins\nint\n(V" + b"7" * 50_000 + b"\ntR."],
    ids=["INT", "LONG", "int-call"],
)
def test_pickled_integer_text_is_bounded_before_it_is_converted(raw, tmp_path):
    # With Python's digit limit lifted, INT loaded a 166 000-bit integer (unchecked), and every
    # form converted 2 MB of digits (quadratic: 27 s) before the bit count was checked.
    import base64
    import json

    path = tmp_path / "int.zip"
    value = {":type:": "<class 'int'>", ":serialized:": base64.b64encode(raw).decode()}
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(
            "data", json.dumps({"v": value, "ok": {**value, ":serialized:": base64.b64encode(b"I123\n.").decode()}})
        )
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        with pytest.warns(zipsave.SkippedEntryWarning, match="50001 characters|50002 characters|50000 characters"):
            model = zipsave.load(path)
    finally:
        sys.set_int_max_str_digits(previous)
    assert model == {"ok": 123}


def test_integer_text_is_bounded_to_the_digits_of_the_largest_integer():
    import math

    from zipsave import _json
    from zipsave._bounds import MAX_INT_BITS, MAX_INT_DIGITS

    assert MAX_INT_DIGITS == _json.MAX_INT_DIGITS == math.ceil(MAX_INT_BITS * math.log10(2))
