"""Archives of SB3 before 2.7 written on another CPython than the suite's (made by
``tests/data/sb3_old/make_sb3_pythons.py``: CPython 3.12 and 3.13, SB3 2.3.2 and 2.0.0): a safe
load keeps every schedule (``lr_schedule``, ``clip_range``, ``exploration_schedule``), pickled as
closures whose bytecode is that Python's, and the model acts as it did."""

from __future__ import annotations

import json
import pathlib
import re
import warnings

import numpy as np
import pytest

import zipsave

pytest.importorskip("stable_baselines3")
from stable_baselines3 import DQN, PPO, SAC, TD3  # noqa: E402

CLASSES = {"PPO": PPO, "DQN": DQN, "SAC": SAC, "TD3": TD3}
FOLDERS = sorted(p for p in (pathlib.Path(__file__).parent / "data" / "sb3_old").glob("py3.*-sb3-*") if p.is_dir())
CASES = [(folder, name) for folder in FOLDERS for name in json.loads((folder / "expected.json").read_text())["models"]]


def test_archives_of_other_pythons_are_at_hand():
    written = {json.loads((f / "expected.json").read_text())["versions"]["python"][:4] for f in FOLDERS}
    assert {"3.12", "3.13"} <= written
    for folder in FOLDERS:
        version = json.loads((folder / "expected.json").read_text())["versions"]["stable_baselines3"]
        assert tuple(map(int, version.split(".")[:2])) < (2, 7)


@pytest.mark.parametrize(("folder", "name"), CASES, ids=[f"{f.name}/{n}" for f, n in CASES])
def test_every_schedule_is_kept_and_the_model_acts_the_same(folder, name):
    expected = json.loads((folder / "expected.json").read_text())["models"][name]
    report = zipsave.LoadReport()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = zipsave.load(folder / f"{name}.zip", cls=CLASSES[expected["class"]], device="cpu", report=report)
    # the only note a safe load gives: a DQN of SB3 < 2.4 (its exploration schedule's end point)
    notes = [str(w.message) for w in caught if not re.search("comes from DQN of SB3 < 2.4", str(w.message))]
    assert notes == [] and report.skipped == []
    assert [model.lr_schedule(p) for p in (1.0, 0.5, 0.0)] == pytest.approx(expected["lr_schedule"])
    for key, points in (("clip_range", (1.0, 0.5, 0.0)), ("exploration_schedule", (1.0, 0.7, 0.0))):
        if key in expected:
            assert [getattr(model, key)(p) for p in points] == pytest.approx(expected[key])
    actions, _ = model.predict(np.asarray(expected["observations"], dtype=np.float32), deterministic=True)
    np.testing.assert_allclose(actions, np.asarray(expected["actions"]), rtol=1e-6, atol=1e-6)
