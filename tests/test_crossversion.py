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


# sb3-2.3: the lowest stack before SB3's floor became 2.7 (gymnasium 0.29.0, SB3 2.3.0, whose
# schedules are closures), kept so that such archives stay covered.
@pytest.mark.parametrize("stack", ["newest", "lowest", "sb3-2.3"])
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
    elif stack == "sb3-2.3":
        assert (written_with["gymnasium"], written_with["stable-baselines3"]) == ("0.29.0", "2.3.0")
    else:
        assert int(written_with["gymnasium"].split(".")[0]) >= 1
        assert int(written_with["numpy"].split(".")[0]) >= 2
