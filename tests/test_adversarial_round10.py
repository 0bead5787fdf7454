"""Round ten of the adversarial suite: SB3 and sb3-contrib values the first ``learn`` cannot
use that round nine left open (a value-function clip range of 0 or below, TRPO's negative
``target_kl``, ARS's counts and its derived ``pop_size``, an ``ent_coef='auto_<x>'`` SAC asserts
on): each is now one skipped key, where the whole load failed or the first ``learn`` did."""

from __future__ import annotations

import io
import json
import re
import warnings
import zipfile

import pytest

import zipsave

torch = pytest.importorskip("torch")
sb3 = pytest.importorskip("stable_baselines3")

from models import rewrite_data  # noqa: E402


def _env(name):
    from stable_baselines3.common.env_util import make_vec_env

    return make_vec_env(name, n_envs=1, seed=0)


def _contrib():
    return pytest.importorskip("sb3_contrib")


#: (class, env, constructor keywords) of each small model the cases rewrite
MODELS = {
    "ppo": (lambda: sb3.PPO, "CartPole-v1", {"n_steps": 16, "batch_size": 8, "n_epochs": 1}),
    "sac": (
        lambda: sb3.SAC,
        "Pendulum-v1",
        {"learning_starts": 4, "buffer_size": 64, "batch_size": 4, "policy_kwargs": {"net_arch": [8]}},
    ),
    "trpo": (
        lambda: _contrib().TRPO,
        "Pendulum-v1",
        {"n_steps": 32, "batch_size": 16, "policy_kwargs": {"net_arch": [8]}},
    ),
    "ars": (lambda: _contrib().ARS, "CartPole-v1", {"n_delta": 2, "policy_kwargs": {"net_arch": [8]}}),
}


@pytest.fixture(scope="module")
def saved():
    cache: dict[str, bytes] = {}

    def get(which: str) -> bytes:
        if which not in cache:
            cls, env, kwargs = MODELS[which]
            out = io.BytesIO()
            cls()("MlpPolicy", env, device="cpu", seed=0, **kwargs).save(out)
            cache[which] = out.getvalue()
        return cache[which]

    return get


OUT_OF_RANGE = {
    # what the old tree did
    "ppo-clip_range_vf-0": ("ppo", "clip_range_vf", 0),  # the whole load refused (SB3's assert)
    "ppo-clip_range_vf--0.5": ("ppo", "clip_range_vf", -0.5),  # the same
    "trpo-target_kl--1": ("trpo", "target_kl", -1.0),  # ValueError at learn: NaN weights (sqrt of -2)
    "ars-n_delta-0": ("ars", "n_delta", 0),  # IndexError at learn
    "ars-n_top-0": ("ars", "n_top", 0),  # learned, and the weights were NaN
    "ars-pop_size-0": ("ars", "pop_size", 0),  # learn never finished (no candidate steps an env)
    "ars-pop_size-7": ("ars", "pop_size", 7),  # candidates of another count than 2 * n_delta
    "sac-ent_coef-auto_nan": ("sac", "ent_coef", "auto_nan"),  # the whole load refused (SB3's assert)
    "sac-ent_coef-auto_-1": ("sac", "ent_coef", "auto_-1"),  # the same
    "sac-ent_coef-auto_0": ("sac", "ent_coef", "auto_0"),  # the same
    "sac-ent_coef-auto_x": ("sac", "ent_coef", "auto_x"),  # the same (ValueError: no float)
}


@pytest.mark.parametrize("case", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_a_value_the_first_learn_cannot_use_is_one_skipped_key(saved, tmp_path, case):
    which, key, value = case
    path = rewrite_data(saved(which), tmp_path / "range.zip", {key: value})
    cls, env = MODELS[which][0](), MODELS[which][1]
    with pytest.raises(zipsave.DecodeError, match=re.escape(f"where {cls.__name__} ")) as caught:
        zipsave.load(path, cls=cls, env=_env(env), device="cpu", strict=True)
    assert caught.value.key == key and caught.value.member == "data"
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        model = zipsave.load(path, cls=cls, env=_env(env), device="cpu")
    assert any(f"`{key}`" in str(w.message) for w in caught_warnings)  # ARS's n_delta: and pop_size
    assert getattr(model, key) != value
    model.learn(16)
    assert all(p.detach().isfinite().all() for p in model.policy.parameters())


SB3_TAKES = {
    "ppo-clip_range_vf-0.1": ("ppo", "clip_range_vf", 0.1),
    "trpo-target_kl-0": ("trpo", "target_kl", 0.0),
    "ars-n_top-1": ("ars", "n_top", 1),
    "sac-ent_coef-auto_0.5": ("sac", "ent_coef", "auto_0.5"),
    "sac-ent_coef-auto": ("sac", "ent_coef", "auto"),
}


@pytest.mark.parametrize("case", SB3_TAKES.values(), ids=SB3_TAKES.keys())
def test_values_sb3_takes_still_load(saved, tmp_path, case):
    which, key, value = case
    path = rewrite_data(saved(which), tmp_path / "takes.zip", {key: value})
    cls, env = MODELS[which][0](), MODELS[which][1]
    model = zipsave.load(path, cls=cls, env=_env(env), device="cpu", strict=True)
    assert key == "clip_range_vf" or getattr(model, key) == value  # PPO makes its schedule


# -- the manifest's state_dict_values: a word about values, never about live objects -----------


def _remanifest(saved: bytes, change) -> io.BytesIO:
    with zipfile.ZipFile(io.BytesIO(saved)) as zf:
        items = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(items["manifest.json"])
    change(manifest)
    items["manifest.json"] = json.dumps(manifest).encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, raw_bytes in items.items():
            zf.writestr(name, raw_bytes)
    out.seek(0)
    return out


@pytest.fixture()
def trained():
    torch.manual_seed(0)
    net = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(net.parameters())
    net(torch.ones(2)).sum().backward()
    opt.step()
    saved = io.BytesIO()
    zipsave.save({"model": net, "optimizer": opt, "epoch": 3, "sd": net.state_dict()}, saved)
    return net, saved.getvalue()


def test_a_manifest_calling_a_live_modules_member_a_value_still_restores_it(trained):
    # The old tree's restore took the manifest's word: `model.pth` and `optimizer.pth` were
    # values, never loaded over a stateful object, and restore returned having restored
    # neither, without a warning. A strict restore names them (a value where the app state
    # holds a module), as for a state dict saved as a value.
    net, saved = trained

    def mark(manifest):
        manifest["state_dict_values"].update({"model.pth": 0, "optimizer.pth": 1})

    live = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(live.parameters())
    zipsave.restore({"model": live, "optimizer": opt, "epoch": 0, "sd": None}, _remanifest(saved, mark))
    assert torch.equal(live.weight, net.weight) and len(opt.state_dict()["state"]) == 2
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape("holds stateful entries []")):
        zipsave.restore({"model": live, "optimizer": opt, "sd": None}, _remanifest(saved, mark), strict=True)
