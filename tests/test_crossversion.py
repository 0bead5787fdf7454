"""Archives written on other dependency stacks (tests/data/crossversion/) load here with equal
spaces and equal actions: the newest stack's on the oldest, the oldest's on the newest."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytest.importorskip("stable_baselines3")

DATA = pathlib.Path(__file__).parent / "data" / "crossversion"


def _script():
    spec = importlib.util.spec_from_file_location("crossversion", DATA / "crossversion.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("stack", ["newest", "lowest"])
def test_archives_from_another_stack_load_the_same(stack):
    written_with = _script().check(DATA / stack)
    # The committed archives really come from the stacks they are named after.
    if stack == "lowest":
        pins = dict(
            line.split("#")[0].strip().split("==")
            for line in (DATA.parents[2] / ".ci" / "constraints-lowest.txt").read_text().splitlines()
            if "==" in line.split("#")[0]
        )
        for name in ("gymnasium", "numpy", "stable-baselines3", "cloudpickle", "orjson"):
            assert written_with[name] == pins[name], name
    else:
        assert int(written_with["gymnasium"].split(".")[0]) >= 1
        assert int(written_with["numpy"].split(".")[0]) >= 2
