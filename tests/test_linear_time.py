"""Load time is linear in every dimension of an archive that its author controls (issue 40).

Wall-clock time is measured in ``benchmarks/scaling.py``; here each reading verb runs on an
archive with N and with 10·N items of one dimension and the Python and C function calls it
makes are counted (``sys.setprofile``). A per-item scan of every member name (the quadratic
load of component folders, 16 000 of which took 52 s) shows as calls growing 100-fold.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import zipsave
from zipsave._tools._diff import diff
from zipsave._tools._verify import verify

#: Calls may grow a little faster than the items (a fixed part is shared): 10x items, <= 12x calls.
MAX_RATIO = 12


def _scaling():
    """``benchmarks/scaling.py``, whose archive builders the benchmark times and this test counts."""
    spec = importlib.util.spec_from_file_location("scaling", Path(__file__).parent.parent / "benchmarks" / "scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_build = _scaling()
_zip, _saved = _build.zip_of, _build.saved


#: dimension -> (N, archive with N items)
DIMENSIONS: dict[str, tuple[int, Callable[[int], bytes]]] = {
    "members": (40, lambda n: _zip({"data": b"{}", **{f"extra{i}.txt": b"" for i in range(n)}})),
    "component folders": (40, lambda n: _zip({"data": b"{}", **{f"comp{i}/data": b'{"x": 1}' for i in range(n)}})),
    "dict of components": (40, lambda n: _zip({"data": b"{}", **{f"agents/a{i}/data": b'{"x": 1}' for i in range(n)}})),
    "data keys": (100, lambda n: _saved({f"key{i}": i for i in range(n)})),
    "nested data": (40, lambda n: _saved({"d": {f"k{i}": {"v": [i, {"w": i}]} for i in range(n)}})),
    "manifest entries": (600, _build.missing_members),
    "tensors per .pth": (
        30,
        lambda n: _saved({"m": torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(2)) for _ in range(n)])}),
    ),
    "arrays": (20, _build.arrays),
}

VERBS: dict[str, Callable[[io.BytesIO], object]] = {
    "load": lambda f: zipsave.load(f),
    "load_archive": lambda f: zipsave.load_archive(f),
    "inspect": lambda f: zipsave.inspect(f),
    "verify": lambda f: verify(f),
    "diff": lambda f: diff(f, io.BytesIO(f.getvalue())),
}


def _calls(verb: Callable[[io.BytesIO], object], raw: bytes) -> int:
    count = 0

    def profile(frame, event, arg) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skipped entries of hostile shapes warn, one each
        sys.setprofile(profile)
        try:
            verb(io.BytesIO(raw))
        except zipsave.ZipsaveError:
            pass  # a refusal counts too: it must come as fast
        finally:
            sys.setprofile(None)
    return count


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize("dimension", sorted(DIMENSIONS))
def test_work_grows_linearly(dimension, verb):
    n, build = DIMENSIONS[dimension]
    small, large = build(n), build(10 * n)
    _calls(VERBS[verb], small)  # imports and first-use caches out of the count
    ratio = _calls(VERBS[verb], large) / _calls(VERBS[verb], small)
    assert ratio <= MAX_RATIO, f"{dimension} x10 made {verb} call {ratio:.1f}x as many functions"


def test_the_count_sees_a_quadratic_scan():
    """The measure itself: a scan of every name per item is caught."""

    def quadratic(f: io.BytesIO) -> None:
        names = zipfile.ZipFile(f).namelist()
        for name in names:
            [other for other in names if other.startswith(name)]

    n, build = DIMENSIONS["members"]
    ratio = _calls(quadratic, build(10 * n)) / _calls(quadratic, build(n))
    assert ratio > 5 * MAX_RATIO
