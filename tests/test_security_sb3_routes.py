"""SB3's doors against hostile archives (issue #27): names SB3 follows with getattr, the saved
``env`` string, classes admitted by reference that SB3 would call, spaces SB3 compares, and
SB3's own exceptions. Each door: ``zipsave.load(cls=PPO)`` and ``PPO.load``/``set_parameters``
under ``zipsave.sb3.install()``."""

from __future__ import annotations

import base64
import io
import json
import pickle
import re
import sys
import warnings
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch

import zipsave

sb3 = pytest.importorskip("stable_baselines3")

from stable_baselines3 import PPO  # noqa: E402

import zipsave.sb3  # noqa: E402

HOSTILE = "__class__.__init__.__globals__.sys.modules.zipsave._trust._allowlist.CORE_ALLOWLIST"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("ppo") / "ppo.zip"
    PPO(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=32,
        batch_size=32,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    ).save(path)
    return path.read_bytes()


@pytest.fixture
def marker(tmp_path, monkeypatch):
    """A module whose import writes a marker file (what `gymnasium.make("mod:Env-v0")` would import)."""
    name = f"zs_env_marker_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(f"open({str(tmp_path / 'IMPORTED')!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    assert not (tmp_path / "IMPORTED").exists() and name not in sys.modules


def _archive(tmp_path, saved, data_changes=None, members=None):
    path = tmp_path / "hostile.zip"
    with zipfile.ZipFile(io.BytesIO(saved)) as zf:
        items = {n: zf.read(n) for n in zf.namelist()}
    data = json.loads(items["data"])
    data.update(data_changes or {})
    items["data"] = json.dumps(data).encode()
    items.update(members or {})
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in items.items():
            if raw is not None:
                zf.writestr(name, raw)
    return path


def _pth(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _serialized(value):
    return {
        ":type:": f"<class '{type(value).__name__}'>",
        ":serialized:": base64.b64encode(pickle.dumps(value, 4)).decode(),
    }


def _loads(path, env=None):
    """The doors, each as a callable: zipsave.load(cls=PPO) and PPO.load under install()."""

    def installed_load():
        zipsave.sb3.install()
        try:
            return PPO.load(path, env=env, device="cpu")
        finally:
            zipsave.sb3.uninstall()

    return [lambda: zipsave.load(path, cls=PPO, env=env, device="cpu"), installed_load]


def test_saved_env_string_is_information_only(tmp_path, saved, marker):
    path = _archive(tmp_path, saved, {"env": f"{marker}:Nope-v0"})
    for load in _loads(path):
        model = load()
        assert model.env is None
    report = zipsave.LoadReport()
    zipsave.load(path, cls=PPO, device="cpu", report=report)
    assert any("information only" in n and "Nope-v0" in n for n in report.notes)


@pytest.mark.parametrize("door", [0, 1])
def test_loose_variable_names_never_leave_the_model(tmp_path, saved, door):
    path = _archive(tmp_path, saved, members={"pytorch_variables.pth": _pth({HOSTILE: torch.zeros(1)})})
    with pytest.raises(zipsave.UnsafeNameError, match=re.escape("steps through `__class__`")):
        _loads(path)[door]()
    assert "os.system" not in zipsave._trust.default_allowlist()


def test_set_parameters_member_names_never_leave_the_model(tmp_path, saved, installed):
    path = _archive(tmp_path, saved, members={"policy.__class__.pth": _pth({})})
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, device="cpu", policy_kwargs={"net_arch": [8]})
    with pytest.raises(zipsave.UnsafeNameError, match=re.escape("`policy.__class__`")):
        model.set_parameters(path, exact_match=False)


def test_data_key_shadowing_a_method_is_refused(tmp_path, saved):
    # `model.__dict__.update(data)` then `model._setup_model()`: a planted `_setup_model` would be called.
    path = _archive(tmp_path, saved, {"_setup_model": 1})
    for load in _loads(path):
        with pytest.raises(zipsave.UnsafeNameError, match=re.escape("`_setup_model`")):
            load()


def test_reference_class_is_never_a_features_extractor(tmp_path, saved, marker):
    # PPO is admitted by reference (the caller named cls=PPO) only as the policy class; as a
    # features extractor SB3 would call PPO(observation_space, ...), making the env it names.
    kwargs = {
        "net_arch": [8],
        "features_extractor_class": PPO,
        "features_extractor_kwargs": {"env": f"{marker}:Nope-v0"},
    }
    path = _archive(tmp_path, saved, {"policy_kwargs": _serialized(kwargs), "env": f"{marker}:Nope-v0"})
    for load in _loads(path):
        with pytest.raises(zipsave.ZipsaveError, match="policy_kwargs"), warnings.catch_warnings():
            warnings.simplefilter("ignore", zipsave.SkippedEntryWarning)  # install(): PPO is not trusted there
            load()


def test_action_noise_must_be_an_action_noise(tmp_path, saved):
    from stable_baselines3.common.noise import NormalActionNoise

    noise = NormalActionNoise(np.zeros(1), np.ones(1))
    noise._mu = PPO  # a class where SB3 keeps an array: calling the noise would use it
    path = _archive(tmp_path, saved, {"action_noise": _serialized(noise)})
    with pytest.raises(zipsave.ZipsaveError, match="action_noise"):
        zipsave.load(path, cls=PPO, device="cpu", strict=True)


def test_box_with_bounds_that_are_not_arrays_never_reaches_sb3(tmp_path, saved):
    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    box.low = [0.0] * 4
    path = _archive(tmp_path, saved, {"observation_space": _serialized(box)})
    for load in _loads(path, env=gym.make("CartPole-v1")):
        with pytest.raises(zipsave.ZipsaveError, match="observation_space"), warnings.catch_warnings():
            warnings.simplefilter("ignore", zipsave.SkippedEntryWarning)  # skipped, then required
            load()


def test_sb3_assertions_are_zipsave_errors(tmp_path, saved, installed):
    path = _archive(tmp_path, saved, members={"data": None})
    # SB3 asserts "No data found in the saved file"; zipsave says what the file holds instead
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("has no `data` member, so it holds no model")):
        PPO.load(path, device="cpu")


def test_reference_class_is_policy_class_only(tmp_path, saved):
    path = _archive(tmp_path, saved, {"rollout_extra": _serialized({"factory": [PPO]})})
    with pytest.raises(zipsave.UnsafeGlobalError, match=re.escape("as the model's `policy_class`")) as info:
        zipsave.load(path, cls=PPO, device="cpu")
    assert info.value.key == "rollout_extra"
