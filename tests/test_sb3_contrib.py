"""sb3-contrib's seven algorithms in safe mode: archives written by their own ``save`` and by
``zipsave.save`` load with the defaults (no ``trusted=``), act as the saved model did (RecurrentPPO
with its LSTM states) and go on training; sb3-contrib's own ``load`` reads zipsave's archives."""

from __future__ import annotations

import pickle
import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import zipsave
from zipsave._trust import TrustPolicy, restricted_loads

sb3_contrib = pytest.importorskip("sb3_contrib")  # in the `test` extra
from sb3_contrib import ARS, QRDQN, TQC, TRPO, CrossQ, MaskablePPO, RecurrentPPO  # noqa: E402
from sb3_contrib.common.envs import InvalidActionEnvDiscrete  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.policies import ActorCriticPolicy  # noqa: E402

SMALL = {"net_arch": [8]}
ALGOS = {
    "ARS": (ARS, "LinearPolicy", "CartPole-v1", {"n_delta": 2}),
    "CrossQ": (CrossQ, "MlpPolicy", "Pendulum-v1", {"learning_starts": 8, "buffer_size": 200, "policy_kwargs": SMALL}),
    "MaskablePPO": (MaskablePPO, "MlpPolicy", None, {"n_steps": 32, "batch_size": 32, "policy_kwargs": SMALL}),
    "QRDQN": (QRDQN, "MlpPolicy", "CartPole-v1", {"learning_starts": 8, "buffer_size": 200, "policy_kwargs": SMALL}),
    "RecurrentPPO": (
        RecurrentPPO,
        "MlpLstmPolicy",
        "CartPole-v1",
        {"n_steps": 32, "batch_size": 32, "policy_kwargs": SMALL},
    ),
    "TQC": (TQC, "MlpPolicy", "Pendulum-v1", {"learning_starts": 8, "buffer_size": 200, "policy_kwargs": SMALL}),
    "TRPO": (TRPO, "MlpPolicy", "CartPole-v1", {"n_steps": 32, "batch_size": 32, "policy_kwargs": SMALL}),
}


def _env(name):
    spec = ALGOS[name][2]
    return InvalidActionEnvDiscrete(dim=20, n_invalid_actions=10) if spec is None else gym.make(spec)


def _observations(model, n=5):
    space = model.observation_space
    if not hasattr(space, "low"):
        space.seed(1)
        return np.stack([space.sample() for _ in range(n)])
    rng = np.random.default_rng(1)
    low, high = np.maximum(space.low, -2), np.minimum(space.high, 2)
    return rng.uniform(low, high, size=(n, *space.shape)).astype(space.dtype)


def _actions(model, obs):
    """Deterministic actions, one observation at a time; a recurrent policy carries its LSTM
    states from step to step, so equal actions and states mean equal memory too."""
    out, state, start = [], None, np.array([True])
    for o in obs:
        action, state = model.predict(o[None], state=state, episode_start=start, deterministic=True)
        start = np.array([False])
        out.append(np.asarray(action))
        if state is not None:
            out.extend(np.asarray(s) for s in state)
    return out


@pytest.fixture(scope="module")
def trained():
    models = {}
    for name, (cls, policy, _, kwargs) in ALGOS.items():
        torch.manual_seed(0)
        kwargs = {k: dict(v) if isinstance(v, dict) else v for k, v in kwargs.items()}  # SB3 edits policy_kwargs
        model = cls(policy, _env(name), seed=0, **kwargs)
        model.learn(64)
        models[name] = model
    return models


@pytest.mark.parametrize("writer", ["own_save", "zipsave_save"])
@pytest.mark.parametrize("name", sorted(ALGOS))
def test_contrib_archive_loads_safely_acts_identically_and_trains(tmp_path, trained, name, writer):
    cls = ALGOS[name][0]
    model = trained[name]
    path = tmp_path / f"{name}.zip"
    if writer == "own_save":
        model.save(path)
    else:
        zipsave.save(model, path)
    obs = _observations(model)
    report = zipsave.LoadReport()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing lost, nothing to say
        loaded = zipsave.load(path, cls=cls, env=_env(name), report=report)
    # ARS's own save pickles `weights` as a torch tensor with torch's pickle helpers: read
    # through weights-only stand-ins (torch.load with weights_only=True), nothing is skipped.
    assert [e.key for e in report.skipped] == []
    if name == "ARS":
        assert torch.equal(loaded.weights, model.weights)
    assert type(loaded) is cls and type(loaded.policy) is type(model.policy)
    for a, b in zip(_actions(model, obs), _actions(loaded, obs), strict=True):
        np.testing.assert_array_equal(a, b)
    loaded.learn(32 if name != "ARS" else 64)  # continues training
    if writer == "zipsave_save":  # the other direction: sb3-contrib reads zipsave's archive
        theirs = cls.load(path)
        for a, b in zip(_actions(model, obs), _actions(theirs, obs), strict=True):
            np.testing.assert_array_equal(a, b)


# -- the principled rule: classes the caller named are references, not callables -------------
class MyPolicy(ActorCriticPolicy):
    """A policy class on no allowlist; named only through ``MyPPO.policy_aliases``."""


class MyPPO(PPO):
    policy_aliases = {**PPO.policy_aliases, "MyPolicy": MyPolicy}


def test_a_class_the_caller_named_is_trusted_as_a_reference(tmp_path):
    model = MyPPO("MyPolicy", "CartPole-v1", n_steps=32, batch_size=32, policy_kwargs=dict(SMALL), seed=0)
    model.save(tmp_path / "mine.zip")
    loaded = zipsave.load(tmp_path / "mine.zip", cls=MyPPO)
    assert loaded.policy_class is MyPolicy and type(loaded.policy) is MyPolicy
    # without the caller naming it, the same archive needs an opt-in; said once, by the error
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(
            zipsave.DecodeError, match=re.escape(f"refusing to import untrusted global `{__name__}.MyPolicy`")
        ):
            zipsave.load(tmp_path / "mine.zip", cls=PPO)


class Named:
    def __init__(self, x=0):
        self.x = x


def test_a_pickle_that_calls_a_named_class_stays_under_the_allowlist():
    policy = TrustPolicy().with_references([Named])
    assert restricted_loads(pickle.dumps(Named), policy) is Named  # a reference: fine
    with pytest.raises(
        zipsave.UnsafeGlobalError,
        match=re.escape(f"NEWOBJ calls `{__name__}.Named`, which this load trusts as a reference only"),
    ):
        restricted_loads(pickle.dumps(Named(1)), policy)
    with pytest.raises(
        zipsave.DecodeError,
        match=re.escape(f"copyreg._reconstructor needs classes the pickle imported by name, got {__name__}.Named."),
    ):
        restricted_loads(pickle.dumps(Named(1), protocol=0), policy)


def test_an_ars_linear_policy_of_sb3_contrib_before_1_7_loads_its_weights(tmp_path):
    # sb3-contrib < 1.7 had `action_net = nn.Linear` (keys `action_net.weight`); now it is a
    # Sequential (`action_net.0.weight`). sb3-contrib's ARS renames them on load; so does zipsave.
    import io
    import zipfile

    model = ARS("LinearPolicy", "CartPole-v1", n_delta=2, seed=0)
    with torch.no_grad():
        model.policy.action_net[0].weight.copy_(torch.arange(8.0).reshape(2, 4))
    model.save(tmp_path / "ars.zip")
    with zipfile.ZipFile(tmp_path / "ars.zip") as zf:
        members = {name: zf.read(name) for name in zf.namelist()}
    old = torch.load(io.BytesIO(members["policy.pth"]), weights_only=True)
    buffer = io.BytesIO()
    torch.save({k.replace("action_net.0.", "action_net."): v for k, v in old.items()}, buffer)
    members["policy.pth"] = buffer.getvalue()
    with zipfile.ZipFile(tmp_path / "ars_1_6.zip", "w") as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)
    with pytest.warns(zipsave.ZipsaveWarning, match="sb3-contrib < 1.7") as caught:
        loaded = zipsave.load(tmp_path / "ars_1_6.zip", cls=ARS)
    assert len(caught) == 1
    assert torch.equal(loaded.policy.action_net[0].weight, torch.arange(8.0).reshape(2, 4))
    weights = next(e for e in zipsave.inspect(tmp_path / "ars_1_6.zip").data if e.key == "weights")
    assert "torch.storage._load_from_bytes" in weights.globals and weights.untrusted == ()
    obs = np.random.default_rng(0).uniform(-1, 1, (8, 4)).astype(np.float32)
    assert np.array_equal(loaded.predict(obs)[0], model.predict(obs)[0])


def test_a_named_class_past_many_values_is_still_refused_outside_policy_class(tmp_path):
    # The walk for misplaced classes looks at every value: a budget of 100 000 let a reference
    # placed after a long list through.
    import base64
    import json
    import zipfile

    model = MyPPO("MyPolicy", "CartPole-v1", n_steps=32, batch_size=32, policy_kwargs=dict(SMALL), seed=0)
    model.save(tmp_path / "mine.zip")
    with zipfile.ZipFile(tmp_path / "mine.zip") as zf:
        members = {name: zf.read(name) for name in zf.namelist() if name != "manifest.json"}
    data = json.loads(members["data"])
    smuggled = {":type:": "<class 'type'>", ":serialized:": base64.b64encode(pickle.dumps(MyPolicy)).decode()}
    members["data"] = json.dumps({"aaa_padding": list(range(150_000)), **data, "zz_smuggled": smuggled}).encode()
    with zipfile.ZipFile(tmp_path / "smuggled.zip", "w") as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)
    with pytest.raises(zipsave.UnsafeGlobalError, match="only because the load named it") as info:
        zipsave.load(tmp_path / "smuggled.zip", cls=MyPPO)
    assert info.value.key == "zz_smuggled"
