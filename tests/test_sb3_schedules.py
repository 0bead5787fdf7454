"""Archives of SB3 before 2.7 (schedules pickled as closures; made by
``tests/data/sb3_old/make_sb3_old.py`` with SB3 2.0.0, numpy 1.26, gymnasium 0.28.1): a safe load
rebuilds SB3's own schedules without running them, refuses a user's lambda with one warning per
hyper-parameter, and never decodes or warns about a key the caller overrides."""

from __future__ import annotations

import base64
import json
import pathlib
import re
import warnings
import zipfile

import cloudpickle
import numpy as np
import pytest

import zipsave
from zipsave import _tools

pytest.importorskip("stable_baselines3")
from stable_baselines3 import A2C, DQN, PPO, SAC  # noqa: E402
from stable_baselines3.common import utils  # noqa: E402

from zipsave.sb3._schedules import NotASchedule, recognise_schedule  # noqa: E402

DATA = pathlib.Path(__file__).parent / "data" / "sb3_old"
EXPECTED = json.loads((DATA / "expected.json").read_text())
CLASSES = {"PPO": PPO, "A2C": A2C, "DQN": DQN, "SAC": SAC}
CLEAN = ["ppo_constant", "ppo_linear", "a2c", "sac"]


def _load(name, **kwargs):
    return zipsave.load(DATA / f"{name}.zip", cls=CLASSES[EXPECTED["models"][name]["class"]], **kwargs)


def test_the_archives_come_from_sb3_before_2_7():
    assert EXPECTED["versions"]["stable_baselines3"] == "2.0.0"
    assert EXPECTED["versions"]["numpy"].startswith("1.")


@pytest.mark.parametrize("name", CLEAN)
def test_schedules_are_rebuilt_with_their_values(name):
    expected = EXPECTED["models"][name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = _load(name)
    assert [model.lr_schedule(p) for p in (1.0, 0.5, 0.0)] == pytest.approx(expected["lr_schedule"])
    if "clip_range" in expected:
        assert [model.clip_range(p) for p in (1.0, 0.5, 0.0)] == pytest.approx(expected["clip_range"])
    assert model.zipsave_report.ok if hasattr(model, "zipsave_report") else True
    actions, _ = model.predict(np.asarray(expected["observations"], dtype=np.float32), deterministic=True)
    np.testing.assert_array_equal(actions, np.asarray(expected["actions"]))


def test_a_linear_learning_rate_becomes_a_linear_schedule():
    model = _load("ppo_linear")
    assert isinstance(model.learning_rate, utils.LinearSchedule)
    assert (model.learning_rate.start, model.learning_rate.end, model.learning_rate.end_fraction) == (1e-3, 1e-4, 1.0)
    assert model.lr_schedule(0.5) == pytest.approx(5.5e-4)


def test_dqn_exploration_schedule_is_rebuilt():
    expected = EXPECTED["models"]["dqn"]
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("comes from DQN of SB3 < 2.4")):
        model = _load("dqn")
    assert [model.exploration_schedule(p) for p in (1.0, 0.7, 0.0)] == pytest.approx(expected["exploration_schedule"])


def test_read_rebuilds_a_schedule_closure_as_load_archive_does():
    # `zipsave read ppo_linear.zip lr_schedule` (cli.rst's example, `zipsave read model.zip
    # learning_rate`) refused SB3's closure (cloudpickle's `_make_function`) that every load
    # and load_archive rebuild without running it; a lambda is still refused.
    data, _, _ = zipsave.load_archive(DATA / "ppo_linear.zip")
    for key in ("learning_rate", "lr_schedule", "clip_range"):
        assert repr(zipsave.read(DATA / "ppo_linear.zip", key)) == repr(data[key])
    assert zipsave.read(DATA / "dqn.zip", "exploration_schedule")(0.0) == pytest.approx(
        EXPECTED["models"]["dqn"]["exploration_schedule"][-1]
    )
    with pytest.raises(zipsave.UnsafeGlobalError, match="cloudpickle"):
        zipsave.read(DATA / "ppo_lambda.zip", "learning_rate")


def test_a_lambda_is_refused_with_one_warning_naming_the_fallback():
    with pytest.warns(zipsave.ZipsaveWarning) as caught:
        model = _load("ppo_lambda")
    assert len(caught) == 1, [str(w.message) for w in caught]
    text = str(caught[0].message)
    assert "`learning_rate` and `lr_schedule` could not be decoded" in text
    assert "`__main__.main.<locals>.<lambda>` is not one of SB3's schedule closures" in text
    assert "the model falls back to `learning_rate=0.0003`" in text
    assert "`custom_objects={'learning_rate': ...}`" in text and "`allow_pickle=True`" in text
    assert caught[0].filename == __file__
    assert model.learning_rate == 3e-4
    # the rest of the archive's schedules still come back
    assert model.clip_range(1.0) == pytest.approx(0.2)


def test_a_key_the_caller_overrides_is_never_decoded_nor_warned_about():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = _load("ppo_lambda", learning_rate=1e-3)
        assert model.learning_rate == 1e-3 and model.lr_schedule(0.5) == pytest.approx(1e-3)
        model = _load("ppo_lambda", custom_objects={"learning_rate": 2e-3, "lr_schedule": utils.ConstantSchedule(2e-3)})
        assert model.learning_rate == 2e-3
    assert (
        not any(e.key == "learning_rate" for e in model.zipsave_report.skipped)
        if hasattr(model, "zipsave_report")
        else True
    )


def _entry(obj):
    return {":type:": "<class 'function'>", ":serialized:": base64.b64encode(cloudpickle.dumps(obj)).decode()}


def test_get_schedule_fn_of_a_constant_is_recognised():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # SB3 >= 2.7 deprecates get_schedule_fn
        wrapped = utils.get_schedule_fn(0.25)
    rebuilt = recognise_schedule(_entry(wrapped))
    assert isinstance(rebuilt, utils.FloatSchedule) and rebuilt(0.3) == 0.25


@pytest.mark.parametrize("value", [lambda p: p, print, np.float64(1.0)], ids=["lambda", "builtin", "not_a_function"])
def test_anything_else_is_not_a_schedule(value):
    with pytest.raises(NotASchedule):
        recognise_schedule(_entry(value))


def test_a_forged_closure_with_other_code_is_not_recognised():
    def constant_fn(val):
        def func(_):
            return val * 2  # other code, same names

        return func

    forged = constant_fn(1.0)
    forged.__module__ = "stable_baselines3.common.utils"
    forged.__qualname__ = "constant_fn.<locals>.func"
    with pytest.raises(NotASchedule, match=re.escape("other")):
        recognise_schedule(_entry(forged))


# -- closures pickled by every CPython 3.8-3.13 (tests/data/sb3_old/make_closures.py) ----------
CLOSURES = json.loads((DATA / "closures.json").read_text())


def _pickled(python, name):
    return {":type:": "<class 'function'>", ":serialized:": CLOSURES[python][name]}


def test_closures_of_every_python_are_at_hand():
    assert sorted(CLOSURES) == ["3.10", "3.11", "3.12", "3.13", "3.8", "3.9"]


@pytest.mark.parametrize("python", sorted(CLOSURES))
def test_sb3_closures_of_any_python_are_rebuilt(python):
    constant = recognise_schedule(_pickled(python, "constant_fn"))
    linear = recognise_schedule(_pickled(python, "get_linear_fn"))
    wrapped = recognise_schedule(_pickled(python, "get_schedule_fn"))
    assert constant(0.3) == 0.25
    assert [linear(p) for p in (1.0, 0.75, 0.0)] == pytest.approx([1e-3, 5.5e-4, 1e-4])
    assert isinstance(wrapped, utils.FloatSchedule) and wrapped(0.7) == 0.2


@pytest.mark.parametrize("python", sorted(CLOSURES))
@pytest.mark.parametrize("module", ["rl_zoo3.utils", "utils.utils"])
def test_zoo_closures_of_any_python_are_rebuilt(python, module):
    pytest.importorskip("rl_zoo3")
    from zipsave.sb3._zoo import schedules_in

    found = schedules_in({"learning_rate": _pickled(python, f"zoo:{module}")})
    assert found["learning_rate"](0.5) == pytest.approx(0.0005)
    clip = recognise_schedule(_pickled(python, f"sb3_of_zoo:{module}"))
    assert isinstance(clip, utils.FloatSchedule) and clip(0.5) == pytest.approx(0.1)


@pytest.mark.parametrize("python", sorted(CLOSURES))
def test_a_lambda_of_any_python_is_refused(python):
    with pytest.raises(NotASchedule, match=re.escape("`__main__.<lambda>` is not one of SB3's schedule closures")):
        recognise_schedule(_pickled(python, "lambda"))


def test_a_lambda_schedule_is_warned_about_when_saving_and_sb3s_closures_are_not(tmp_path):
    ppo = PPO(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=32,
        batch_size=32,
        policy_kwargs={"net_arch": [8]},
        device="cpu",
        learning_rate=lambda progress: 1e-3 * progress,
    )
    with pytest.warns(
        zipsave.ZipsaveWarning,
        match=re.escape("`learning_rate`, `lr_schedule` hold code that cloudpickle stores by value"),
    ) as caught:
        zipsave.save(ppo, tmp_path / "lambda.zip")
    assert "custom_objects={'learning_rate': ..., 'lr_schedule': ...}" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # SB3's deprecation of get_linear_fn
        ppo.learning_rate = utils.get_linear_fn(1e-3, 1e-4, 0.5)  # SB3's own closure: a load rebuilds it
    ppo._setup_lr_schedule()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        zipsave.save(ppo, tmp_path / "closure.zip")


# -- what inspect and diff say of a schedule (the load's recognition, never unpickling) ---------
ZOO = pathlib.Path(__file__).parent / "data" / "rl_zoo"
SB3_2 = pathlib.Path(__file__).parent / "data" / "sb3"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (DATA / "ppo_linear.zip", {"learning_rate": "linear 0.001 to 0.0001", "lr_schedule": "linear 0.001 to 0.0001"}),
        (DATA / "ppo_linear.zip", {"clip_range": "linear 0.3 to 0.1 over the first 50% of training"}),
        (DATA / "dqn.zip", {"lr_schedule": "constant 0.0001"}),
        (DATA / "dqn.zip", {"exploration_schedule": "linear 1 to 0.05 over the first 50% of training"}),
        (SB3_2 / "ppo_cartpole.zip", {"lr_schedule": "constant 0.0003", "clip_range": "constant 0.2"}),  # FloatSchedule
        (
            ZOO / "ppo_CartPole-v1.zip",
            {"learning_rate": "linear 0.001 to 0 (RL Zoo)", "clip_range": "linear 0.2 to 0 (RL Zoo)"},
        ),
    ],
    ids=["sb3-1-linear", "sb3-1-end-fraction", "sb3-1-constant", "dqn-exploration", "sb3-2-objects", "rl-zoo"],
)
def test_inspect_says_what_a_schedule_is(path, expected):
    entries = {e.key: e for e in zipsave.inspect(path).data}
    for key, words in expected.items():
        entry = entries[key]
        assert (entry.summary, entry.rebuilt, entry.needs_pickle, entry.trusted) == (words, True, False, True)
        assert entry.form == "pickle" and entry.globals  # stored as a pickle: what it names is still listed
    text = str(zipsave.inspect(path))
    for key, words in expected.items():
        assert re.search(
            rf"^  {key}\s+\S+\s+pickle\s+{re.escape(words)}; a load rebuilds it without unpickling$", text, re.M
        )


def test_inspect_still_lists_a_lambda_as_an_untrusted_pickle():
    entry = next(e for e in zipsave.inspect(DATA / "ppo_lambda.zip").data if e.key == "learning_rate")
    assert (entry.rebuilt, entry.needs_pickle, entry.trusted) == (False, True, False)
    assert entry.summary.startswith("pickle, ") and "cloudpickle.cloudpickle._make_function" in entry.untrusted


def test_diff_names_the_schedules_instead_of_function(capsys):
    from zipsave import cli

    changes = {
        c.name: (c.old, c.new) for c in _tools.diff(DATA / "ppo_linear.zip", DATA / "ppo_constant.zip").data_changed
    }
    assert changes["lr_schedule"] == ("linear 0.001 to 0.0001", "constant 0.0003")
    assert changes["clip_range"] == ("linear 0.3 to 0.1 over the first 50% of training", "constant 0.2")
    assert changes["learning_rate"] == ("linear 0.001 to 0.0001", "0.0003")
    assert cli.main(["diff", str(DATA / "ppo_linear.zip"), str(DATA / "ppo_constant.zip")]) == 1
    assert "~ data    lr_schedule: linear 0.001 to 0.0001 -> constant 0.0003\n" in capsys.readouterr().out


def _with_data(source, target, **entries):
    """A copy of SB3's archive ``source`` with ``data`` entries replaced (SB3 writes no manifest)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            body = old.read(info)
            if info.filename == "data":
                body = json.dumps({**json.loads(body), **entries}, indent=4).encode()
            new.writestr(info, body)
    return target


def test_diff_of_one_schedule_pickled_by_two_pythons_is_the_same_value(tmp_path):
    # SB3's constant_fn closure as CPython 3.8 and 3.13 pickled it: other bytes, one schedule
    old = _with_data(DATA / "ppo_constant.zip", tmp_path / "old.zip", lr_schedule=_pickled("3.8", "constant_fn"))
    new = _with_data(DATA / "ppo_constant.zip", tmp_path / "new.zip", lr_schedule=_pickled("3.13", "constant_fn"))
    result = _tools.diff(old, new)
    assert result.data_stored_differently == ("lr_schedule",) and not result.data_changed
    lam = _with_data(DATA / "ppo_constant.zip", tmp_path / "lambda.zip", lr_schedule=_pickled("3.13", "lambda"))
    change = _tools.diff(old, lam).data_changed
    assert [(c.name, c.old, c.new) for c in change] == [("lr_schedule", "constant 0.25", "<function>")]
