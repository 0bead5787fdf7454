"""``zipsave diff`` on values a real library writes that equal themselves only as stored: NaN
(Python's json, and so SB3, writes the ``NaN`` token). An archive compared with itself, or with
a copy, is identical; a change to or from NaN shows the NaN."""

from __future__ import annotations

import contextlib
import io
import json
import math
import pathlib
import sys

from zipsave import cli
from zipsave._tools import diff

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from adversarial.printed import base_members, write_zip  # noqa: E402


def _archive(path: pathlib.Path, data: dict) -> str:
    files = base_members()
    files["data"] = json.dumps(data).encode()  # Python's json, as SB3 writes it: NaN, Infinity
    return write_zip(str(path), files)


def _cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main(argv)
    return code, out.getvalue()


def test_an_archive_holding_nan_is_identical_to_itself(tmp_path):
    data = {"lr": 0.5, "clip": math.nan, "pair": [1.0, math.nan], "nested": {"x": [math.nan]}}
    a = _archive(tmp_path / "a.zip", data)
    b = _archive(tmp_path / "b.zip", data)
    for other in (a, b):
        result = diff(a, other)
        assert not result.data_changed and not result.data_stored_differently, result
        code, text = _cli(["diff", a, other])
        assert code == 0 and "identical" in text, text


def test_a_change_to_nan_shows_nan(tmp_path):
    a = _archive(tmp_path / "a.zip", {"lr": 0.5, "pair": [1.0, 2.0]})
    b = _archive(tmp_path / "b.zip", {"lr": math.nan, "pair": [1.0, -math.inf]})
    code, text = _cli(["diff", a, b])
    assert code == 1
    assert "lr: 0.5 -> NaN" in text and "pair: [1.0,2.0] -> [1.0,-Infinity]" in text, text
    assert "null" not in text, text


def test_nan_stored_by_sb3_and_by_zipsave_is_the_same_value(tmp_path):
    # SB3 writes the NaN token, zipsave its native float form: equal values, stored differently
    a = _archive(tmp_path / "a.zip", {"lr": 0.5, "clip": math.nan, "c": [1.0]})
    files = base_members()
    files["data"] = json.dumps(
        {
            "lr": 0.5,
            "clip": {":type:": "<class 'float'>", ":zipsave:": {"kind": "float", "value": "nan"}},
            "c": [1.0],
        }
    ).encode()
    b = write_zip(str(tmp_path / "b.zip"), files)
    result = diff(a, b)
    assert not result.data_changed and result.data_stored_differently == ("clip",), result
