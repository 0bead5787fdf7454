"""Real Stable-Baselines3 archives in and out: SB3's loader and models are the reference.

SB3 is in the ``test`` extra. Tests that need it are marked ``needs_sb3``; the committed
archives under ``tests/data/sb3/`` are also loaded in a subprocess with SB3 blocked, which is
what a machine without SB3 sees.
"""

from __future__ import annotations

import base64
import collections
import copy
import enum
import importlib
import importlib.util
import json
import math
import pathlib
import re
import subprocess
import sys
import textwrap
import types
import warnings
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch

import zipsave
from zipsave._core import recursive_getattr
from zipsave._trust import pickle_globals

DATA = pathlib.Path(__file__).parent / "data" / "sb3"
EXPECTED = json.loads((DATA / "expected.json").read_text())
HAVE_SB3 = importlib.util.find_spec("stable_baselines3") is not None
needs_sb3 = pytest.mark.skipif(not HAVE_SB3, reason="stable-baselines3 is in the `test` extra")

if HAVE_SB3:
    from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
    from stable_baselines3.common.save_util import load_from_zip_file, save_to_zip_file
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
else:  # pragma: no cover - SB3 is in the test extra
    BaseFeaturesExtractor = torch.nn.Module


# -- deep equality -----------------------------------------------------------------------------
def assert_same(a, b, where="value"):
    """Equal in type and value, all the way down: arrays by dtype, shape and bits; spaces with
    their random generators; classes by identity; functions by code and behaviour."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), f"{where}: {type(b)} is not a tensor"
        assert (a.dtype, a.shape, a.device, a.requires_grad) == (b.dtype, b.shape, b.device, b.requires_grad), where
        assert torch.equal(a, b), where
        assert isinstance(a, torch.nn.Parameter) == isinstance(b, torch.nn.Parameter), where
    elif isinstance(a, np.ndarray):
        assert type(b) is np.ndarray, f"{where}: {type(b)} is not an ndarray"
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{where}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), where
    elif isinstance(a, np.generic):
        assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
        assert a == b or (np.isnan(a) and np.isnan(b)), where
    elif isinstance(a, gym.spaces.Space):
        assert type(a) is type(b) and a == b, f"{where}: {a} != {b}"
        assert a.dtype == b.dtype, where
        if isinstance(a, gym.spaces.Box):
            assert_same(a.low, b.low, f"{where}.low")
            assert_same(a.high, b.high, f"{where}.high")
        for key in getattr(a, "spaces", {}) if isinstance(a, gym.spaces.Dict) else ():
            assert_same(a[key], b[key], f"{where}[{key!r}]")
        assert (a._np_random is None) == (b._np_random is None), f"{where}: one space has an RNG"
        if a._np_random is not None:
            assert a.np_random.bit_generator.state == b.np_random.bit_generator.state, f"{where}: RNG state"
    elif isinstance(a, (type, enum.Enum)):
        assert a is b, f"{where}: {a!r} is not {b!r}"
    elif isinstance(a, types.FunctionType):
        assert isinstance(b, types.FunctionType), f"{where}: {type(b)} is not a function"
        assert (a.__qualname__, a.__code__.co_code, a.__code__.co_consts) == (
            b.__qualname__,
            b.__code__.co_code,
            b.__code__.co_consts,
        ), where
        for progress in (1.0, 0.5, 0.0):
            assert a(progress) == b(progress), f"{where}({progress})"
    elif isinstance(a, collections.deque):
        assert type(b) is collections.deque and a.maxlen == b.maxlen, where
        assert_same(list(a), list(b), where)
    elif isinstance(a, dict):
        assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{where}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert type(b) is float and (a == b or (math.isnan(a) and math.isnan(b))), f"{where}: {a!r} != {b!r}"
    elif hasattr(a, "__dict__") and not isinstance(a, types.ModuleType):
        assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
        assert_same(vars(a), vars(b), f"{where}.__dict__")
        if callable(a):
            for progress in (1.0, 0.5, 0.0):
                assert a(progress) == b(progress), f"{where}({progress})"
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


def assert_same_archive(ours, theirs):
    for name, x, y in zip(("data", "params", "pytorch_variables"), ours, theirs):
        assert_same(x, y, name)


def test_assert_same_tells_apart_what_matters():
    space = gym.spaces.Box(-1, 1, (2,))
    other = gym.spaces.Box(-1, 1, (2,))
    space.seed(0)
    other.seed(1)
    for a, b in [
        (np.zeros(2, np.float32), np.zeros(2, np.float64)),
        (np.zeros(2), np.zeros(3)),
        ((1, 2), [1, 2]),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        (1, 1.0),
        (collections.deque([1], maxlen=2), collections.deque([1], maxlen=3)),
        (space, other),
        (torch.zeros(1), torch.zeros(1, dtype=torch.float64)),
        (lambda p: p, lambda p: 2 * p),
        (int, float),
    ]:
        with pytest.raises(AssertionError):
            assert_same(a, b)
    assert_same(
        {"x": [np.float32(1.5), float("nan"), (np.arange(3),)]}, {"x": [np.float32(1.5), float("nan"), (np.arange(3),)]}
    )


# -- the models --------------------------------------------------------------------------------
class DictObsEnv(gym.Env):
    """A tiny env with a Dict observation space (PPO's MultiInputPolicy)."""

    def __init__(self):
        self.observation_space = gym.spaces.Dict(
            {"position": gym.spaces.Box(-1.0, 1.0, (3,), np.float32), "mode": gym.spaces.Discrete(3)}
        )
        self.action_space = gym.spaces.Discrete(2)
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self._steps += 1
        return self.observation_space.sample(), float(action), False, self._steps >= 20, {}


class BigObsEnv(gym.Env):
    """Observations of 80 KB, so ``_last_obs`` is stored as a .npy member."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (20_000,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def _tiny(**extra):
    return {"net_arch": [16], **extra}


def _on_policy(cls, env, **kw):
    steps = {"n_steps": 64, "batch_size": 32, "n_epochs": 1} if cls is PPO else {"n_steps": 8}
    return cls("MlpPolicy", env, policy_kwargs=_tiny(), seed=0, **{**steps, **kw})


def _off_policy(cls, env, **kw):
    return cls("MlpPolicy", env, learning_starts=32, buffer_size=500, policy_kwargs=_tiny(), seed=0, **kw)


# name -> (make the model, make an env to load it with)
CASES = {
    "ppo": (lambda: _on_policy(PPO, "CartPole-v1"), lambda: gym.make("CartPole-v1")),
    "a2c": (lambda: _on_policy(A2C, "CartPole-v1"), lambda: gym.make("CartPole-v1")),
    "dqn": (lambda: _off_policy(DQN, "CartPole-v1"), lambda: gym.make("CartPole-v1")),
    "sac": (lambda: _off_policy(SAC, "Pendulum-v1"), lambda: gym.make("Pendulum-v1")),
    "td3": (lambda: _off_policy(TD3, "Pendulum-v1"), lambda: gym.make("Pendulum-v1")),
    "ddpg": (lambda: _off_policy(DDPG, "Pendulum-v1"), lambda: gym.make("Pendulum-v1")),
    "ppo_dict_obs": (
        lambda: PPO(
            "MultiInputPolicy", DictObsEnv(), n_steps=64, batch_size=32, n_epochs=1, policy_kwargs=_tiny(), seed=0
        ),
        DictObsEnv,
    ),
    "ppo_lambda_lr": (
        lambda: _on_policy(PPO, "CartPole-v1", learning_rate=lambda p: 3e-4 * p),
        lambda: gym.make("CartPole-v1"),
    ),
    "a2c_inf_grad_norm": (
        lambda: _on_policy(A2C, "CartPole-v1", max_grad_norm=float("inf")),
        lambda: gym.make("CartPole-v1"),
    ),
    "sac_sde": (lambda: _off_policy(SAC, "Pendulum-v1", use_sde=True), lambda: gym.make("Pendulum-v1")),
}
# Keys pickled by value (the lambda): skipped, with a warning, unless allow_pickle=True.
BY_VALUE = {"ppo_lambda_lr": ["learning_rate", "lr_schedule"]}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Each case trained for a few seeded steps and saved by SB3 itself."""
    if not HAVE_SB3:
        pytest.skip("stable-baselines3 is in the `test` extra")
    folder = tmp_path_factory.mktemp("sb3")
    out = {}
    for name, (make, _) in CASES.items():
        model = make()
        model.learn(64)
        path = folder / f"{name}.zip"
        model.save(path)
        out[name] = (type(model), path, model)
    return out


def _fixed_observations(space, n=6):
    probe = copy.deepcopy(space)  # never touch the model's own space RNG
    probe.seed(123)
    samples = [probe.sample() for _ in range(n)]
    if isinstance(space, gym.spaces.Dict):
        return {k: np.stack([s[k] for s in samples]) for k in space.spaces}
    return np.stack(samples)


def _same_actions(a, b, obs):
    actions_a, _ = a.predict(obs, deterministic=True)
    actions_b, _ = b.predict(obs, deterministic=True)
    np.testing.assert_array_equal(actions_a, actions_b)


def _load_quietly(path, **kwargs):
    """zipsave.load_archive, expecting the skip warnings only for by-value functions."""
    name = pathlib.Path(path).stem
    expected = BY_VALUE.get(name, [])
    if not expected or kwargs.get("allow_pickle"):
        return zipsave.load_archive(path, **kwargs), []
    with pytest.warns(zipsave.SkippedEntryWarning) as record:
        result = zipsave.load_archive(path, **kwargs)
    return result, record


# -- 1. SB3 archives in --------------------------------------------------------------------
@needs_sb3
@pytest.mark.parametrize("name", CASES)
def test_load_archive_with_pickle_matches_sb3(trained, name):
    _, path, _ = trained[name]
    assert_same_archive(zipsave.load_archive(path, allow_pickle=True), load_from_zip_file(path))


@needs_sb3
@pytest.mark.parametrize("name", CASES)
def test_load_archive_safely_matches_sb3_except_by_value_functions(trained, name):
    _, path, _ = trained[name]
    (data, params, variables), record = _load_quietly(path)
    sb3_data, sb3_params, sb3_variables = load_from_zip_file(path)
    skipped = BY_VALUE.get(name, [])
    assert sorted(w.message.entry.key for w in record) == sorted(skipped)
    for w in record:
        assert "refusing to import untrusted global `cloudpickle." in str(w.message)
    assert list(data) == [k for k in sb3_data if k not in skipped]
    assert_same(data, {k: v for k, v in sb3_data.items() if k not in skipped}, "data")
    assert_same(params, sb3_params, "params")
    assert_same(variables, sb3_variables, "pytorch_variables")


@needs_sb3
def test_bare_infinity_token_is_read(trained):
    _, path, _ = trained["a2c_inf_grad_norm"]
    raw = zipfile.ZipFile(path).read("data").decode()
    assert '"max_grad_norm": Infinity' in raw
    data, _, _ = zipsave.load_archive(path)
    assert data["max_grad_norm"] == math.inf


@needs_sb3
def test_sb3_globals_come_from_the_reviewed_allowlist(trained):
    """Every global the archives' pickles name is either allowlisted or a by-value function."""
    from zipsave._trust import default_allowlist
    from zipsave.sb3 import SB3_ALLOWLIST

    DEFAULT_ALLOWLIST = default_allowlist()

    needed = set()
    for _, path, _ in trained.values():
        for value in json.loads(zipfile.ZipFile(path).read("data")).values():
            if isinstance(value, dict) and ":serialized:" in value:
                needed.update(pickle_globals(base64.b64decode(value[":serialized:"])))
    # a function stored by value names its code's class as `_builtin_type("CodeType")`, which
    # the audit lists as what it gives, `types.CodeType` (refused: no code is built)
    by_value = {g for g in needed if g.startswith("cloudpickle.") or g == "types.CodeType"}
    assert needed - by_value <= DEFAULT_ALLOWLIST
    assert {g for g in needed if g.startswith("stable_baselines3.")} <= SB3_ALLOWLIST
    for name in SB3_ALLOWLIST:  # every reviewed entry names a real object (a class attribute too)
        parts = name.split(".")
        for at in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
            try:
                found = importlib.import_module(".".join(parts[:at]))
                break
            except ImportError:
                continue
        for attr in parts[at:]:
            if name == "rl_zoo3.utils.SimpleLinearSchedule" and not hasattr(found, attr):
                import rl_zoo3  # the lowest stack's rl-zoo3 predates it (2.7)

                assert tuple(map(int, rl_zoo3.__version__.split(".")[:2])) < (2, 7)
                break
            found = getattr(found, attr)


# -- 3. a working model back ---------------------------------------------------------------
@needs_sb3
@pytest.mark.parametrize("name", CASES)
def test_load_model_predicts_like_sb3_and_learns(trained, name):
    cls, path, _ = trained[name]
    make_env = CASES[name][1]
    reference = cls.load(path, env=make_env())
    if name in BY_VALUE:
        with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("could not be decoded")):
            model = zipsave.load(path, cls=cls, env=make_env())
    else:
        model = zipsave.load(path, cls=cls, env=make_env())
    assert type(model) is cls
    obs = _fixed_observations(model.observation_space)
    _same_actions(model, reference, obs)
    for sd_name in model._get_torch_save_params()[0]:
        ours = recursive_getattr(model, sd_name).state_dict()
        theirs = recursive_getattr(reference, sd_name).state_dict()
        assert_same(ours, theirs, sd_name)
    assert model.num_timesteps == reference.num_timesteps
    model.learn(32, reset_num_timesteps=False)
    assert model.num_timesteps >= reference.num_timesteps + 32


@needs_sb3
def test_load_without_env_predicts(trained):
    cls, path, original = trained["sac"]
    model = zipsave.load(path, cls=cls)
    assert model.env is None
    _same_actions(model, original, _fixed_observations(original.observation_space))
    torch.testing.assert_close(model.log_ent_coef, original.log_ent_coef)


@needs_sb3
def test_tensors_are_read_into_the_new_policy(trained, monkeypatch):
    """In place: the reader fills every parameter, so no tensor is copied into the policy."""
    from zipsave.sb3 import _build as _sb3

    cls, path, _ = trained["ppo"]
    copies, loading = [], []
    original_copy, original_load = torch.Tensor.copy_, _sb3.load_parameters

    def copy_(self, src, *args, **kwargs):
        if loading and isinstance(src, torch.Tensor) and src.data_ptr() != self.data_ptr():
            copies.append(tuple(self.shape))
        return original_copy(self, src, *args, **kwargs)

    def load_parameters(*args):  # only the parameter loading, not the model's own init
        loading.append(True)
        try:
            return original_load(*args)
        finally:
            loading.clear()

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    monkeypatch.setattr(_sb3, "load_parameters", load_parameters)
    model = zipsave.load(path, cls=cls)
    assert copies == []
    loading.append(True)  # the check sees SB3's way: load a copy, then copy it in
    model.set_parameters(load_from_zip_file(path)[1])
    assert (16, 4) in copies


@needs_sb3
def test_lambda_learning_rate_loads_with_allow_pickle(trained):
    cls, path, original = trained["ppo_lambda_lr"]
    model = zipsave.load(path, cls=cls, allow_pickle=True)
    assert model.learning_rate(0.5) == original.learning_rate(0.5)


@needs_sb3
def test_skipped_learning_rate_falls_back_and_is_reported(trained):
    cls, path, _ = trained["ppo_lambda_lr"]
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.ZipsaveWarning) as record:
        model = zipsave.load(path, cls=cls, report=report)
    assert len(record) == 1  # one warning for the hyper-parameter, with what it falls back to
    assert "`learning_rate` and `lr_schedule` could not be decoded" in str(record[0].message)
    assert "falls back to `learning_rate=0.0003`" in str(record[0].message)
    assert sorted(e.key for e in report.skipped) == ["learning_rate", "lr_schedule"]
    assert model.learning_rate == 3e-4  # PPO's default, as SB3 does with a skipped key
    assert any("`learning_rate`" in note and "constructor" in note for note in report.notes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overridden key is never decoded nor warned about
        model = zipsave.load(path, cls=cls, learning_rate=1e-3)
    assert model.lr_schedule(1.0) == 1e-3


# -- SB3's checks, with the root cause -------------------------------------------------------------
def _edit_sb3_data(path, out, edit):
    """Rewrite an SB3 archive's ``data`` (Python's json, as SB3 writes it)."""
    with zipfile.ZipFile(path) as zf:
        items = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(out, "w") as zf:
        for info, raw in items:
            if info.filename == "data":
                data = json.loads(raw)
                edit(data)
                raw = json.dumps(data, indent=4).encode()
            zf.writestr(info, raw)
    return out


@needs_sb3
def test_skipped_space_is_named_with_its_cause(trained, tmp_path):
    """SB3 #1682: SB3 says "observation_space and action_space were not given"; we name why."""
    cls, path, _ = trained["ppo"]

    def rename_space(data):
        # A space class that no longer exists under its saved name (a gym/gymnasium upgrade).
        data["observation_space"][":serialized:"] = base64.b64encode(
            b"\x80\x04cgymnasium.spaces.box\nOldBox\n."
        ).decode()

    broken = _edit_sb3_data(path, tmp_path / "broken.zip", rename_space)
    with (
        pytest.raises(KeyError, match="observation_space and action_space were not given"),
        pytest.warns(UserWarning, match="Could not deserialize object observation_space"),
    ):
        cls.load(broken)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, by the error
        with pytest.raises(zipsave.DecodeError) as info:
            zipsave.load(broken, cls=cls, env=gym.make("CartPole-v1"))
    assert info.value.key == "observation_space"
    assert info.value.member == "data"
    message = str(info.value)
    assert "cannot build PPO: `observation_space` could not be decoded and PPO needs it" in message
    assert "refusing to import untrusted global `gymnasium.spaces.box.OldBox`" in message
    assert "custom_objects={'observation_space': ...}" in message
    # The fix the message suggests works:
    model = zipsave.load(
        broken, cls=cls, custom_objects={"observation_space": gym.make("CartPole-v1").observation_space}
    )
    assert isinstance(model.observation_space, gym.spaces.Box)


class CustomPolicy(PPO.policy_aliases["MlpPolicy"] if HAVE_SB3 else object):
    """A user's policy subclass: not on the allowlist."""


@needs_sb3
def test_untrusted_policy_class_is_named_and_can_be_trusted(tmp_path):
    model = PPO(CustomPolicy, "CartPole-v1", n_steps=64, batch_size=32, n_epochs=1, policy_kwargs=_tiny(), seed=0)
    model.save(tmp_path / "custom.zip")
    global_name = f"{__name__}.CustomPolicy"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, by the error
        with pytest.raises(
            zipsave.DecodeError, match=re.escape(f"refusing to import untrusted global `{global_name}`")
        ) as info:
            zipsave.load(tmp_path / "custom.zip", cls=PPO)
    assert info.value.key == "policy_class"
    loaded = zipsave.load(tmp_path / "custom.zip", cls=PPO, trusted=[CustomPolicy])
    assert type(loaded.policy) is CustomPolicy
    _same_actions(loaded, model, _fixed_observations(model.observation_space))


class CustomActivation(torch.nn.Tanh):
    """A user's activation function class: not on the allowlist either."""


@needs_sb3
def test_two_untrusted_required_keys_each_name_their_own_custom_objects_key(tmp_path):
    # With two keys lost the error named neither in its fix: `custom_objects={key: value}`.
    kwargs = {**_tiny(), "activation_fn": CustomActivation}
    model = PPO(CustomPolicy, "CartPole-v1", n_steps=64, batch_size=32, n_epochs=1, policy_kwargs=kwargs, seed=0)
    model.save(tmp_path / "custom.zip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zipsave.SkippedEntryWarning)
        with pytest.raises(zipsave.DecodeError, match="`policy_class`, `policy_kwargs` could not be decoded") as info:
            zipsave.load(tmp_path / "custom.zip", cls=PPO)
    message = str(info.value)
    assert "custom_objects={'policy_class': ...}" in message and "custom_objects={'policy_kwargs': ...}" in message
    assert "{key: value}" not in message


@needs_sb3
def test_load_without_cls_names_the_fix(trained, tmp_path):
    cls, path, _ = trained["ppo"]
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("holds a Stable-Baselines3 model")) as info:
        zipsave.load(path)
    assert "cls=PPO" in str(info.value)
    model = cls.load(path)
    zipsave.save(model, tmp_path / "z.zip")  # zipsave's own archive of an SB3 model, too
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("holds a Stable-Baselines3 model")):
        zipsave.load(tmp_path / "z.zip")


@needs_sb3
@pytest.mark.parametrize("writer", ["sb3", "zipsave"])
def test_load_without_cls_names_the_algorithm_the_archive_holds(tmp_path, writer):
    # The hint said `cls=PPO` whatever the archive held; the policy class tells, read unexecuted.
    import sb3_contrib
    import stable_baselines3 as sb3

    for name, cls, env, kwargs in [
        ("SAC", sb3.SAC, "Pendulum-v1", {"buffer_size": 64}),
        ("DDPG", sb3.DDPG, "Pendulum-v1", {"buffer_size": 64}),
        ("TD3", sb3.TD3, "Pendulum-v1", {"buffer_size": 64}),
        ("A2C", sb3.A2C, "CartPole-v1", {}),
        ("TRPO", sb3_contrib.TRPO, "CartPole-v1", {}),
        ("QRDQN", sb3_contrib.QRDQN, "CartPole-v1", {"buffer_size": 64}),
    ]:
        model = cls("MlpPolicy", env, policy_kwargs={"net_arch": [4]}, **kwargs)
        path = tmp_path / f"{name}.zip"
        model.save(path) if writer == "sb3" else zipsave.save(model, path)
        with pytest.raises(zipsave.ArchiveFormatError, match=f"model \\({name}, by its policy class\\)") as info:
            zipsave.load(path)
        package = "sb3_contrib" if cls.__module__.startswith("sb3_contrib") else "stable_baselines3"
        assert f"`from {package} import {name}` and `zipsave.load(path, cls={name}, env=env)`" in str(info.value)


@needs_sb3
def test_missing_required_key_is_a_format_error(trained, tmp_path):
    cls, path, _ = trained["ppo"]
    stripped = _edit_sb3_data(path, tmp_path / "stripped.zip", lambda data: data.pop("action_space"))
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("holds no `action_space`, which PPO needs")):
        zipsave.load(stripped, cls=cls)


@needs_sb3
def test_policy_kwargs_must_match(trained):
    cls, path, _ = trained["ppo"]
    with pytest.raises(
        zipsave.ParameterMismatchError, match=re.escape("the `policy_kwargs` given ({'net_arch': [64]})")
    ):
        zipsave.load(path, cls=cls, policy_kwargs={"net_arch": [64]})
    model = zipsave.load(path, cls=cls, policy_kwargs={"net_arch": [16]})
    assert model.policy_kwargs == {"net_arch": [16]}


@needs_sb3
def test_wrong_env_is_refused_as_sb3_does(trained):
    cls, path, _ = trained["ppo"]
    # a ValueError as SB3's, naming the env's spaces and the saved ones (not a damaged archive)
    with pytest.raises(
        ValueError, match=re.escape("the environment given as `env=` has observation_space=Box(")
    ) as err:
        zipsave.load(path, cls=cls, env=gym.make("Acrobot-v1"))
    assert isinstance(err.value, zipsave.ParameterMismatchError)
    assert "action_space=Discrete(3), but the saved PPO was trained with observation_space=Box(" in str(err.value)


@needs_sb3
def test_wrong_algorithm_names_the_policy(trained):
    _, path, _ = trained["ppo"]
    with pytest.raises(
        zipsave.AlgorithmMismatchError, match=re.escape("holds a PPO model; SAC cannot be built")
    ) as info:
        zipsave.load(path, cls=SAC)
    assert "Load it with `PPO.load(path)` or `zipsave.load(path, cls=PPO)`" in str(info.value)


@needs_sb3
def test_exclude_skips_the_optimizer(trained):
    """Inference loads may leave the optimizer state out (sb3-contrib #289)."""
    cls, path, original = trained["ppo"]
    model = zipsave.load(path, cls=cls, exclude=["*.optimizer"])
    assert model.policy.optimizer.state_dict()["state"] == {}
    _same_actions(model, original, _fixed_observations(original.observation_space))


# -- legacy shims (as BaseAlgorithm.load) ---------------------------------------------------------
class TinyExtractor(BaseFeaturesExtractor):
    def __init__(self, observation_space, features_dim=8):
        super().__init__(observation_space, features_dim)
        self.linear = torch.nn.Linear(int(np.prod(observation_space.shape)), features_dim)

    def forward(self, obs):
        return self.linear(obs)


@needs_sb3
def test_sb3_before_1_7_shared_extractor_loads_with_a_warning(tmp_path):
    model = PPO(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=64,
        batch_size=32,
        n_epochs=1,
        seed=0,
        policy_kwargs=_tiny(features_extractor_class=TinyExtractor),
    )
    data, params, variables = load_from_zip_file(_saved(model, tmp_path / "new.zip"), device="cpu")
    # SB3 < 1.7 had only `features_extractor`; drop the newer per-network copies.
    params["policy"] = {k: v for k, v in params["policy"].items() if "_features_extractor." not in k}
    save_to_zip_file(tmp_path / "old.zip", data=data, params=params, pytorch_variables=variables)
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("comes from SB3 < 1.7")):
        loaded = zipsave.load(tmp_path / "old.zip", cls=PPO, trusted=[TinyExtractor])
    assert torch.equal(loaded.policy.features_extractor.linear.weight, model.policy.features_extractor.linear.weight)


def _dqn_before_2_4(path, out, **settings):
    """SB3 < 2.4's DQN archive of the model at ``path``: its optimizer also holds the target
    network's parameters; ``settings`` change its parameter group. Returns the live count."""
    data, params, variables = load_from_zip_file(path, device="cpu")
    group = params["policy.optimizer"]["param_groups"][0]
    n = len(group["params"])
    group["params"] = group["params"] + [i + n for i in group["params"]]  # target network too
    group.update(settings)
    save_to_zip_file(out, data=data, params=params, pytorch_variables=variables)
    return n


@needs_sb3
def test_dqn_before_2_4_optimizer_is_truncated_with_a_warning(trained, tmp_path):
    _, path, original = trained["dqn"]
    n = _dqn_before_2_4(path, tmp_path / "old.zip")
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("comes from DQN of SB3 < 2.4")):
        loaded = zipsave.load(tmp_path / "old.zip", cls=DQN)
    assert len(loaded.policy.optimizer.state_dict()["param_groups"][0]["params"]) == n
    _same_actions(loaded, original, _fixed_observations(original.observation_space))


@needs_sb3
def test_dqn_before_2_4_optimizer_settings_torch_refuses_name_the_member(trained, tmp_path):
    _, path, _ = trained["dqn"]
    _dqn_before_2_4(path, tmp_path / "old.zip", eps=-1.0)  # torch's Adam refuses it
    with pytest.raises(zipsave.ParameterMismatchError, match="Invalid epsilon") as caught:
        zipsave.load(tmp_path / "old.zip", cls=DQN)
    assert (caught.value.member, caught.value.key) == ("policy.optimizer.pth", "param_groups.0")


def _saved(model, path):
    model.save(path)
    return path


# -- 4. zipsave archives out -----------------------------------------------------------------
@needs_sb3
@pytest.mark.parametrize("name", CASES)
def test_sb3_loads_what_zipsave_saves(trained, tmp_path, name):
    cls, path, original = trained[name]
    if name in BY_VALUE:  # said when saving: a safe load will skip it
        with pytest.warns(
            zipsave.ZipsaveWarning,
            match=re.escape(
                f"{', '.join(f'`{k}`' for k in BY_VALUE[name])} hold code that cloudpickle stores by value"
            ),
        ):
            zipsave.save(original, tmp_path / "ours.zip")
    else:
        zipsave.save(original, tmp_path / "ours.zip")
    names = zipfile.ZipFile(tmp_path / "ours.zip").namelist()
    assert "manifest.json" in names
    reference = load_from_zip_file(path)
    theirs = load_from_zip_file(tmp_path / "ours.zip")
    assert list(theirs[0]) == list(reference[0])
    assert_same(theirs[1:], reference[1:], "tensors")
    loaded = cls.load(tmp_path / "ours.zip", env=CASES[name][1]())
    _same_actions(loaded, original, _fixed_observations(original.observation_space))
    assert_same(loaded.observation_space, original.observation_space, "observation_space")
    # and zipsave reads its own archive back (a lambda is still skipped: it has no safe form)
    with warnings.catch_warnings():
        if name in BY_VALUE:
            warnings.filterwarnings("ignore", category=zipsave.ZipsaveWarning, message=".*could not be decoded")
        again = zipsave.load(tmp_path / "ours.zip", cls=cls, env=CASES[name][1]())
    _same_actions(again, original, _fixed_observations(original.observation_space))


@needs_sb3
def test_large_observation_cache_is_none_for_sb3_and_kept_for_zipsave(tmp_path):
    """``_last_obs`` over 64 KiB lives in a .npy member; SB3, which reads only the pickle,
    sees ``None`` and resets the env before training (as its load does by default)."""
    model = PPO("MlpPolicy", BigObsEnv(), n_steps=16, batch_size=16, n_epochs=1, policy_kwargs=_tiny(), seed=0)
    model.learn(16)
    zipsave.save(model, tmp_path / "big.zip")
    with zipfile.ZipFile(tmp_path / "big.zip") as zf:
        assert "arrays/0.npy" in zf.namelist()
        raw = json.loads(zf.read("data"))
    assert raw["_last_obs"][":zipsave:"]["member"] == "arrays/0.npy"
    assert len(raw["_last_obs"][":serialized:"]) < 100  # a pickled None, not 80 KB of base64
    data, _, _ = load_from_zip_file(tmp_path / "big.zip")
    assert data["_last_obs"] is None
    sb3_model = PPO.load(tmp_path / "big.zip", env=BigObsEnv(), force_reset=False)
    sb3_model.learn(16, reset_num_timesteps=False)  # None makes SB3 reset the env first
    ours, _, _ = zipsave.load_archive(tmp_path / "big.zip")
    assert_same(ours["_last_obs"], model._last_obs, "_last_obs")


# -- 5. replay buffer and VecNormalize in the same archive ------------------------------------
@needs_sb3
@pytest.mark.parametrize("name", ["sac", "dqn"])
def test_replay_buffer_round_trip(trained, tmp_path, name):
    cls, _, original = trained[name]
    path = tmp_path / "with_buffer.zip"
    zipsave.save(original, path, include=["replay_buffer"])
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        component = zf.read("replay_buffer/data").decode()
    assert "replay_buffer/data" in names and "replay_buffer/arrays/0.npy" in names
    assert ":serialized:" not in component  # arrays and plain numbers only
    assert not any(n.endswith(".pth") and "/" in n for n in names)  # SB3 would try to load those
    model = zipsave.load(path, cls=cls, env=CASES[name][1]())
    old, new = original.replay_buffer, model.replay_buffer
    assert (new.pos, new.full, new.device) == (old.pos, old.full, model.device)
    for attr in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        assert_same(getattr(new, attr), getattr(old, attr), attr)
    model.learn(40, reset_num_timesteps=False)
    assert new.pos == (old.pos + 40) % new.buffer_size or new.full
    # SB3 itself still loads the archive (and ignores the buffer, as it always did)
    cls.load(path)


@needs_sb3
def test_restore_fills_the_buffer_in_place(trained, tmp_path):
    _, _, original = trained["sac"]
    zipsave.save(original, tmp_path / "m.zip", include=["replay_buffer"])
    fresh = _off_policy(SAC, "Pendulum-v1")
    zipsave.restore(fresh, tmp_path / "m.zip")
    assert fresh.replay_buffer.pos == original.replay_buffer.pos
    assert_same(fresh.replay_buffer.rewards, original.replay_buffer.rewards, "rewards")
    _same_actions(fresh, original, _fixed_observations(original.observation_space))


@needs_sb3
def test_buffer_that_does_not_fit_is_skipped_with_a_warning(trained, tmp_path):
    cls, _, original = trained["sac"]
    zipsave.save(original, tmp_path / "m.zip", include=["replay_buffer"])
    with pytest.warns(
        zipsave.SkippedEntryWarning, match=re.escape("replay buffer with buffer_size=500, but the model's has 1000")
    ):
        model = zipsave.load(tmp_path / "m.zip", cls=cls, buffer_size=1000)
    assert model.replay_buffer.pos == 0


@needs_sb3
def test_extras_that_do_not_exist_are_refused(trained, tmp_path):
    _, _, ppo = trained["ppo"]
    with pytest.raises(zipsave.EncodeError, match=re.escape("PPO has no replay buffer to save.")):
        zipsave.save(ppo, tmp_path / "x.zip", include=["replay_buffer"])
    with pytest.raises(zipsave.EncodeError, match=re.escape("PPO's environment is not wrapped in VecNormalize.")):
        zipsave.save(ppo, tmp_path / "x.zip", include=["vec_normalize"])
    assert not (tmp_path / "x.zip").exists()


@pytest.fixture(scope="module")
def normalized():
    if not HAVE_SB3:
        pytest.skip("stable-baselines3 is in the `test` extra")
    env = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]), clip_obs=5.0, gamma=0.9)
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, policy_kwargs=_tiny(), seed=0)
    model.learn(128)
    return model


def _fresh_venv():
    return DummyVecEnv([lambda: gym.make("CartPole-v1")])


@needs_sb3
def test_vec_normalize_is_restored_by_wrapping_the_env(normalized, tmp_path):
    zipsave.save(normalized, tmp_path / "m.zip", include=["vec_normalize"])
    assert ":serialized:" not in zipfile.ZipFile(tmp_path / "m.zip").read("vec_normalize/data").decode()
    model = zipsave.load(tmp_path / "m.zip", cls=PPO, env=_fresh_venv())
    old, new = normalized.get_vec_normalize_env(), model.get_vec_normalize_env()
    assert isinstance(new, VecNormalize) and model.env is new
    for attr in ("clip_obs", "clip_reward", "gamma", "epsilon", "training", "norm_obs", "norm_reward"):
        assert getattr(new, attr) == getattr(old, attr), attr
    for rms in ("obs_rms", "ret_rms"):
        for attr in ("mean", "var"):
            assert_same(np.asarray(getattr(getattr(new, rms), attr)), np.asarray(getattr(getattr(old, rms), attr)), rms)
        assert getattr(new, rms).count == getattr(old, rms).count
    raw = _fixed_observations(old.observation_space)
    np.testing.assert_array_equal(new.normalize_obs(raw), old.normalize_obs(raw))
    _same_actions(model, normalized, new.normalize_obs(raw))
    model.learn(64, reset_num_timesteps=False)


@needs_sb3
def test_vec_normalize_fills_a_wrapper_the_caller_made(normalized, tmp_path):
    zipsave.save(normalized, tmp_path / "m.zip", include=["vec_normalize"])
    mine = VecNormalize(_fresh_venv(), training=False, norm_reward=False)
    model = zipsave.load(tmp_path / "m.zip", cls=PPO, env=mine)
    assert model.get_vec_normalize_env() is mine
    assert (mine.training, mine.norm_reward) == (False, False)  # the caller's settings stay
    assert_same(vars(mine.obs_rms), vars(normalized.get_vec_normalize_env().obs_rms), "obs_rms")


@needs_sb3
def test_vec_normalize_of_dict_observations(tmp_path):
    venv = VecNormalize(DummyVecEnv([DictObsEnv]), norm_obs_keys=["position"])
    model = PPO("MultiInputPolicy", venv, n_steps=64, batch_size=32, n_epochs=1, policy_kwargs=_tiny(), seed=0)
    model.learn(64)
    zipsave.save(model, tmp_path / "m.zip", include=["vec_normalize"])
    loaded = zipsave.load(tmp_path / "m.zip", cls=PPO, env=DummyVecEnv([DictObsEnv]))
    new = loaded.get_vec_normalize_env()
    assert new.norm_obs_keys == ["position"] and set(new.obs_rms) == {"position"}
    assert_same(new.obs_rms["position"].mean, venv.obs_rms["position"].mean, "obs_rms.position.mean")


@needs_sb3
def test_vec_normalize_without_env_warns(normalized, tmp_path):
    zipsave.save(normalized, tmp_path / "m.zip", include=["vec_normalize"])
    with pytest.warns(
        zipsave.ZipsaveWarning,
        match=re.escape("holds VecNormalize statistics (its `vec_normalize/` folder), but the load got no `env=`"),
    ):
        zipsave.load(tmp_path / "m.zip", cls=PPO)
    model = zipsave.load(tmp_path / "m.zip", cls=PPO, exclude=["vec_normalize"])  # asked for: no warning
    assert model.env is None


# -- 7. committed archives, made by a released SB3 -----------------------------------------------
COMMITTED = sorted(EXPECTED["archives"])


def test_committed_archives_are_small():
    for name in COMMITTED:
        assert (DATA / name).stat().st_size < 200_000


@needs_sb3
@pytest.mark.parametrize("name", COMMITTED)
def test_committed_archive_loads(name):
    expected = EXPECTED["archives"][name]
    data, params, variables = zipsave.load_archive(DATA / name)  # default: no pickle runs freely
    assert list(data) == expected["data_keys"]
    assert sorted(params) == expected["params"]
    assert sorted(variables) == expected["pytorch_variables"]
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        assert_same_archive((data, params, variables), load_from_zip_file(DATA / name))
    else:
        # SB3 pickled these spaces' random generators on numpy 2 (a bit generator class and a
        # (state, seed sequence) pair), which SB3's own loader cannot rebuild on numpy 1.x;
        # zipsave's unpickler reads them there with the same generator state.
        with pytest.raises((ModuleNotFoundError, ValueError), match="numpy._core|is not a known BitGenerator"):
            load_from_zip_file(DATA / name)
        for key in ("observation_space", "action_space"):
            generator = data[key]._np_random
            assert generator is None or generator.bit_generator.state["bit_generator"] == "PCG64"
    cls = {"PPO": PPO, "DQN": DQN, "SAC": SAC}[expected["algorithm"]]
    model = zipsave.load(DATA / name, cls=cls)
    obs = np.asarray(expected["observations"], dtype=model.observation_space.dtype)
    actions, _ = model.predict(obs, deterministic=True)
    np.testing.assert_allclose(actions, np.asarray(expected["actions"]), rtol=0, atol=1e-6)


_BLOCKED = textwrap.dedent(
    """
    import base64, json, sys, warnings
    sys.modules["stable_baselines3"] = None  # as if SB3 were not installed
    import zipsave
    from zipsave._trust import pickle_globals

    path = sys.argv[1]
    import zipfile
    raw = json.loads(zipfile.ZipFile(path).read("data"))
    globals_ = {
        key: pickle_globals(base64.b64decode(value[":serialized:"]))
        for key, value in raw.items() if isinstance(value, dict) and ":serialized:" in value
    }
    info = zipsave.inspect(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data, params, variables = zipsave.load_archive(path)
    print(json.dumps({
        "globals": globals_,
        "skipped": {w.message.entry.key: w.message.entry.cause for w in caught},
        "loaded": list(data),
        "params": {name: sorted(sd) for name, sd in params.items()},
        "variables": sorted(variables),
        "spaces": [type(data["observation_space"]).__name__, type(data["action_space"]).__name__],
        "inspect": len(str(info)) > 0,
        "sb3_modules": sorted(m for m in sys.modules if m.startswith("stable_baselines3") and sys.modules[m] is not None),
    }))
    """
)


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_archive_without_sb3(name):
    """Without SB3, weights, spaces and plain values still load; only entries whose pickles name
    an SB3 class are skipped, each with a warning saying the module cannot be imported."""
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED, str(DATA / name)],
        capture_output=True,
        text=True,
        check=True,
        cwd=pathlib.Path(__file__).parent.parent,
    )
    out = json.loads(done.stdout)
    expected = EXPECTED["archives"][name]
    assert out["sb3_modules"] == []
    needs_sb3_keys = sorted(
        k for k, names in out["globals"].items() if any(g.startswith("stable_baselines3.") for g in names)
    )
    assert "policy_class" in needs_sb3_keys
    assert sorted(out["skipped"]) == needs_sb3_keys
    for cause in out["skipped"].values():
        assert "cannot import module `stable_baselines3" in cause
    assert out["loaded"] == [k for k in expected["data_keys"] if k not in needs_sb3_keys]
    assert sorted(out["params"]) == expected["params"]
    assert sorted(out["variables"]) == expected["pytorch_variables"]
    assert out["spaces"] in (["Box", "Discrete"], ["Box", "Box"])
    assert out["inspect"]


# -- 6. memory: never two copies of a .pth member ------------------------------------------------
def _sb3_memory():
    """``benchmarks/sb3_memory.py``, whose fresh-interpreter measurement the docs' memory table
    comes from: the test checks the same figure."""
    spec = importlib.util.spec_from_file_location(
        "sb3_memory", pathlib.Path(__file__).parent.parent / "benchmarks" / "sb3_memory.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure_peak(mode, path, warm_up):
    """Peak RSS growth (bytes) of one load (a mode of ``benchmarks/sb3_memory.py``) in a fresh
    interpreter, after loading ``warm_up`` (a small archive of the same kind) once so that
    imports do not count."""
    done = subprocess.run(
        [sys.executable, "-c", _sb3_memory().MEASURE, mode, str(warm_up), str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=pathlib.Path(__file__).parent.parent,
    )
    return json.loads(done.stdout)["peak"]


def big_ppo_archive(path, width):
    """An untrained PPO whose policy is about 8 * width**2 bytes (empty optimizer state)."""
    model = PPO(
        "MlpPolicy", "CartPole-v1", policy_kwargs={"net_arch": [width, width], "ortho_init": False}, device="cpu"
    )
    model.save(path)
    return sum(p.numel() * p.element_size() for p in model.policy.parameters())


@needs_sb3
@pytest.mark.skipif(not pathlib.Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_load_holds_one_copy_of_the_weights(tmp_path):
    nbytes = big_ppo_archive(tmp_path / "big.zip", 1800)  # ~26 MB of weights
    big_ppo_archive(tmp_path / "small.zip", 8)
    # load: the fresh model (1x) and nothing more; SB3 holds the loaded copy as well (about 2x)
    ours = measure_peak("zipsave.load(..., cls=PPO)", tmp_path / "big.zip", tmp_path / "small.zip")
    assert ours < 1.4 * nbytes, (ours, nbytes)
    # load_archive: the loaded tensors (1x), no second copy of the member
    ours = measure_peak("zipsave.load_archive", tmp_path / "big.zip", tmp_path / "small.zip")
    assert ours < 1.4 * nbytes, (ours, nbytes)
