"""Round eight of the adversarial suite: values a default load hands back that fail on first use
(a float where SB3 takes a size or a count), and what the command prints of an archive."""

from __future__ import annotations

import io
import json
import re
import zipfile

import pytest

import zipsave

pytest.importorskip("stable_baselines3")

from stable_baselines3 import PPO, TD3  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402

import zipsave.sb3  # noqa: E402


def _rewrite(saved: bytes, path, data: dict) -> str:
    """``saved`` with ``data`` keys replaced by the JSON values given; no manifest."""
    with zipfile.ZipFile(io.BytesIO(saved)) as zf:
        items = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    raw = json.loads(items["data"])
    raw.update(data)
    items["data"] = json.dumps(raw).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw_bytes in items.items():
            zf.writestr(name, raw_bytes)
    return str(path)


def _pendulums(n_envs=1):
    return make_vec_env("Pendulum-v1", n_envs=n_envs, seed=0)


def _float32(value):
    return {":type:": "<class 'numpy.float32'>", ":zipsave:": {"kind": "numpy_scalar", "dtype": "<f4", "value": value}}


# -- sizes and counts: integers ------------------------------------------------------------------

NOT_WHOLE = {
    "batch_size-2.5": ("batch_size", 2.5),
    "gradient_steps-1.5": ("gradient_steps", 1.5),
    "_stats_window_size-2.5": ("_stats_window_size", 2.5),
    "batch_size-nan": ("batch_size", float("nan")),
}


@pytest.mark.parametrize("case", NOT_WHOLE.values(), ids=NOT_WHOLE.keys())
def test_a_size_that_is_no_whole_number_is_skipped(tmp_path, td3_saved, case):
    # each loaded, and the first learn() raised numpy's or range()'s TypeError ('expected a
    # sequence of integers or a single integer', "'float' object cannot be interpreted as an
    # integer"); the value check of round seven took any float where the model keeps a number
    key, value = case
    path = _rewrite(td3_saved, tmp_path / "float.zip", {key: value})
    with pytest.raises(zipsave.DecodeError, match=re.escape("keeps an integer (a size or a count)")) as caught:
        zipsave.load(path, cls=TD3, env=_pendulums(), device="cpu", strict=True)
    assert caught.value.key == key and caught.value.member == "data"
    with zipsave.sb3.installed(), pytest.warns(zipsave.SkippedEntryWarning, match=re.escape(f"`{key}`")):
        model = TD3.load(path, env=_pendulums(), device="cpu")
    model.learn(8)


WHOLE = {
    "batch_size-float": ("batch_size", 4.0, 4),
    "learning_starts-1e1": ("learning_starts", 1e1, 10),
    "batch_size-bool": ("batch_size", True, 1),
    "gradient_steps-float32": ("gradient_steps", _float32(2.0), 2),
}


@pytest.mark.parametrize("case", WHOLE.values(), ids=WHOLE.keys())
def test_a_size_saved_as_a_whole_float_is_given_as_an_integer(tmp_path, td3_saved, case):
    # a user may pass batch_size=64.0 or learning_starts=1e4, which SB3 saves as it is; the
    # first learn() of such a model failed as above (True too: numpy's size= refuses a bool)
    key, value, number = case
    path = _rewrite(td3_saved, tmp_path / "whole.zip", {key: value})
    report = zipsave.LoadReport()
    model = zipsave.load(path, cls=TD3, env=_pendulums(), device="cpu", strict=True, report=report)
    assert type(getattr(model, key)) is int and getattr(model, key) == number
    assert any(f"`{key}=" in note for note in report.notes) or type(value) is bool
    model.learn(8)


def test_restore_gives_whole_sizes_and_skips_the_rest(tmp_path, td3_saved):
    path = _rewrite(td3_saved, tmp_path / "restore.zip", {"batch_size": 3.0, "gradient_steps": 0.5})
    kwargs = {"learning_starts": 4, "buffer_size": 64, "policy_kwargs": {"net_arch": [8]}}
    model = TD3("MlpPolicy", _pendulums(), device="cpu", seed=0, **kwargs)
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("`gradient_steps`")):
        zipsave.restore(model, path, device="cpu")
    assert model.batch_size == 3 and type(model.batch_size) is int and model.gradient_steps == 1
    model.learn(8)


def test_a_ppo_epoch_count_of_a_float_is_skipped(tmp_path):
    # PPO's n_epochs=2.5: range() raised TypeError at the first train
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=8, device="cpu")
    model.save(tmp_path / "ppo.zip")
    path = _rewrite((tmp_path / "ppo.zip").read_bytes(), tmp_path / "epochs.zip", {"n_epochs": 2.5})
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("`n_epochs`")):
        loaded = zipsave.load(path, cls=PPO, env=make_vec_env("CartPole-v1"), device="cpu")
    assert loaded.n_epochs == 10  # PPO's default
    loaded.learn(16)
