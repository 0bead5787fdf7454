"""Round nine of the adversarial suite: a ``.pth`` state dict whose ``_metadata`` shares its
lists (a walk of it that never ends), and SB3 values the first ``learn`` cannot use (sizes below
what SB3 computes with, non-finite rates and coefficients, a ``_last_obs`` of another shape than
the environment passed with ``force_reset=False``)."""

from __future__ import annotations

import base64
import collections
import io
import json
import pickle
import re
import zipfile

import numpy as np
import pytest

import zipsave

torch = pytest.importorskip("torch")


# -- a state dict's _metadata is walked like the rest of its tree ------------------------------


def _shared_metadata_archive(path, levels: int) -> str:
    """An archive whose ``policy.pth`` is torch.save's state dict with a dtype as a value (so a
    load turns the reader's stand-ins into torch's) and a ``_metadata`` of ``levels`` lists,
    each holding the one below twice: a few hundred bytes of pickle, 2**levels paths."""
    state = collections.OrderedDict(w=torch.ones(2), kind=torch.float32)
    node: list = [1]
    for _ in range(levels):
        node = [node, node]
    state._metadata = {"": {"version": 1}, "x": node}
    pth = io.BytesIO()
    torch.save(state, pth)
    saved = io.BytesIO()
    zipsave.save_archive(saved, data={"lr": 0.5}, params={"policy": {"w": torch.ones(2)}})
    with zipfile.ZipFile(io.BytesIO(saved.getvalue())) as src, zipfile.ZipFile(path, "w") as out:
        for name in src.namelist():
            if name != "manifest.json":
                out.writestr(name, pth.getvalue() if name == "policy.pth" else src.read(name))
    return str(path)


def test_a_state_dicts_shared_metadata_is_refused(tmp_path, capsys):
    # 18 levels: the old tree loaded it in about a second, walking 2**18 paths to turn the
    # stand-ins into torch's objects; 40 levels (the same bytes, 22 more lists) never finished
    path = _shared_metadata_archive(tmp_path / "meta.zip", 18)
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("shares containers so that walking")) as caught:
        zipsave.load_archive(path)
    assert caught.value.member == "policy.pth"
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("shares containers")):
        zipsave.read(path, "policy/w")


@pytest.mark.parametrize(
    "hidden",
    [torch.arange(4.0), [torch.ones(1)], torch.ones(4).to_sparse()],
    ids=["tensor", "tensor-in-list", "sparse"],
)
def test_a_tensor_in_a_state_dicts_metadata_is_refused(tmp_path, hidden):
    # The reader builds and checks a state dict's items only: a tensor in its `_metadata` came
    # back as the reader's own placeholder (`TensorRef(...)`), never built or checked
    state = collections.OrderedDict(w=torch.ones(2))
    state._metadata = {"": {"version": 1}, "x": hidden}
    pth = io.BytesIO()
    torch.save(state, pth)
    saved = io.BytesIO()
    zipsave.save_archive(saved, data={"lr": 0.5}, params={"policy": {"w": torch.ones(2)}})
    path = tmp_path / "hidden.zip"
    with zipfile.ZipFile(io.BytesIO(saved.getvalue())) as src, zipfile.ZipFile(path, "w") as out:
        for name in src.namelist():
            if name != "manifest.json":
                out.writestr(name, pth.getvalue() if name == "policy.pth" else src.read(name))
    for call in (zipsave.load_archive, zipsave.load):
        with pytest.raises(zipsave.ZipsaveError, match=re.escape("in a state dict's `_metadata`")) as caught:
            call(path)
        assert caught.value.member == "policy.pth"
    assert torch.equal(zipsave.read(path, "policy/w"), torch.ones(2))  # one tensor: its own item


def test_a_state_dicts_own_metadata_still_loads(tmp_path):
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    zipsave.save_archive(tmp_path / "m.zip", data={"lr": 0.5}, params={"policy": module.state_dict()})
    _, params, _ = zipsave.load_archive(tmp_path / "m.zip")
    assert params["policy"]._metadata == module.state_dict()._metadata
    module.load_state_dict(params["policy"])


PLAIN_KINDS = {
    "counter": lambda: collections.Counter({"seen": 3}),
    "counter-of-dtypes": lambda: collections.Counter({torch.float16: 3}),
    "size": lambda: torch.Size([2, 3]),
    "ordered": lambda: collections.OrderedDict(b=1, a=torch.ones(1)),
}


@pytest.mark.parametrize("kind", PLAIN_KINDS)
def test_a_state_dicts_values_keep_the_kind_torch_load_gives(tmp_path, kind):
    # the metadata reader handed back a Counter as a dict (a missing key: KeyError where the
    # Counter gives 0) and a torch.Size as a tuple (no .numel()), unlike torch.load
    value = PLAIN_KINDS[kind]()
    state = {"w": torch.ones(2), "v": value}
    zipsave.save_archive(tmp_path / "v.zip", data={"lr": 0.5}, params={"policy": state})
    with zipfile.ZipFile(tmp_path / "v.zip") as zf:
        expected = torch.load(io.BytesIO(zf.read("policy.pth")), weights_only=True)["v"]
    _, params, _ = zipsave.load_archive(tmp_path / "v.zip")
    loaded = params["policy"]["v"]
    assert type(loaded) is type(expected) is type(value)
    assert repr(loaded) == repr(expected)


# -- SB3: sizes and counts SB3 computes with, finite rates and coefficients ----------------------


def _rewrite(saved: bytes, path, data: dict) -> str:
    """``saved`` with ``data`` keys replaced by the JSON values given; no manifest."""
    with zipfile.ZipFile(io.BytesIO(saved)) as zf:
        items = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    raw = json.loads(items["data"])
    raw.update(data)
    items["data"] = json.dumps(raw).encode()  # NaN and Infinity as Python's json writes them
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw_bytes in items.items():
            zf.writestr(name, raw_bytes)
    return str(path)


@pytest.fixture(scope="module")
def sb3():
    return pytest.importorskip("stable_baselines3")


@pytest.fixture(scope="module")
def ppo_small(sb3, tmp_path_factory):
    path = tmp_path_factory.mktemp("ppo") / "ppo.zip"
    sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=8, n_epochs=1, device="cpu", seed=0).save(path)
    return path.read_bytes()


@pytest.fixture(scope="module")
def sac_small(sb3, tmp_path_factory):
    path = tmp_path_factory.mktemp("sac") / "sac.zip"
    kwargs = {"learning_starts": 4, "buffer_size": 64, "batch_size": 4, "policy_kwargs": {"net_arch": [8]}}
    sb3.SAC("MlpPolicy", "Pendulum-v1", device="cpu", seed=0, **kwargs).save(path)
    return path.read_bytes()


def _env(sb3, name):
    from stable_baselines3.common.env_util import make_vec_env

    return make_vec_env(name, n_envs=1, seed=0)


OUT_OF_RANGE = {
    # what the first learn() of the old tree's model did
    "ppo-n_steps-0": ("ppo", "n_steps", 0),  # UnboundLocalError: new_obs
    "ppo-n_epochs-0": ("ppo", "n_epochs", 0),  # UnboundLocalError: approx_kl_divs
    "ppo-batch_size-0": ("ppo", "batch_size", 0),  # RuntimeError: cannot reshape tensor of 0 elements
    "ppo-gamma-nan": ("ppo", "gamma", float("nan")),  # ValueError: Categorical(logits) of NaN
    "ppo-learning_rate-inf": ("ppo", "learning_rate", float("inf")),  # the same
    "ppo-stats-window--1": ("ppo", "_stats_window_size", -1),  # ValueError: maxlen must be non-negative
    "td3-policy_delay-0": ("td3", "policy_delay", 0),  # ZeroDivisionError
    "td3-batch_size--1": ("td3", "batch_size", -1),  # ValueError: negative dimensions
    "td3-tau-nan": ("td3", "tau", float("nan")),  # learned, and its actor's weights were NaN
    "sac-target_update_interval-0": ("sac", "target_update_interval", 0),  # ZeroDivisionError
    "sac-ent_coef-nan": ("sac", "ent_coef", float("nan")),  # ParameterMismatchError: the whole load refused
}


@pytest.mark.parametrize("case", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_a_number_out_of_the_range_sb3_computes_with_is_skipped(request, sb3, tmp_path, case):
    which, key, value = case
    saved = request.getfixturevalue({"ppo": "ppo_small", "td3": "td3_saved", "sac": "sac_small"}[which])
    cls = {"ppo": sb3.PPO, "td3": sb3.TD3, "sac": sb3.SAC}[which]
    env = "CartPole-v1" if which == "ppo" else "Pendulum-v1"
    path = _rewrite(saved, tmp_path / "range.zip", {key: value})
    with pytest.raises(zipsave.DecodeError, match=re.escape(f"where {cls.__name__} ")) as caught:
        zipsave.load(path, cls=cls, env=_env(sb3, env), device="cpu", strict=True)
    assert caught.value.key == key and caught.value.member == "data"
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape(f"`{key}`")):  # learning_rate: with its fallback
        model = zipsave.load(path, cls=cls, env=_env(sb3, env), device="cpu")
    model.learn(16)
    assert all(p.detach().isfinite().all() for p in model.policy.parameters())


SB3_MEANINGS = {
    "td3-gradient_steps--1": ("gradient_steps", -1),  # as many gradient steps as env steps
    "td3-learning_starts-0": ("learning_starts", 0),
    "td3-target_noise_clip-inf": ("target_noise_clip", float("inf")),  # no clamp
    "td3-stats-window-0": ("_stats_window_size", 0),
}


@pytest.mark.parametrize("case", SB3_MEANINGS.values(), ids=SB3_MEANINGS.keys())
def test_values_sb3_gives_a_meaning_still_load(sb3, tmp_path, td3_saved, case):
    key, value = case
    path = _rewrite(td3_saved, tmp_path / "meaning.zip", {key: value})
    model = zipsave.load(path, cls=sb3.TD3, env=_env(sb3, "Pendulum-v1"), device="cpu", strict=True)
    assert getattr(model, key) == value
    model.learn(16)


# -- SB3: what the next step starts from, on load(env=..., force_reset=False) ---------------------


def _pickled(value):
    typ = f"<class '{type(value).__module__}.{type(value).__qualname__}'>"
    return {":type:": typ, ":serialized:": base64.b64encode(pickle.dumps(value)).decode()}


def _started_pendulum(sb3):
    env = _env(sb3, "Pendulum-v1")
    env.reset()  # force_reset=False steps on from the saved observation: the env is under way
    return env


STALE = {
    "obs-shape": ("_last_obs", np.zeros((3, 7), np.float32)),  # Unexpected observation shape (3, 7)
    "obs-rank": ("_last_obs", np.zeros((1, 3, 1), np.float32)),  # Unexpected observation shape (1, 3, 1)
    "obs-objects": ("_last_obs", np.zeros((1, 3), object)),  # TypeError: can't convert np.ndarray of object_
    "obs-text": ("_last_obs", "x"),  # Unexpected observation shape ()
    "original-obs": ("_last_original_obs", np.zeros((2, 3), np.float32)),
    "episode-starts": ("_last_episode_starts", np.ones(5, bool)),
}


@pytest.mark.parametrize("case", STALE.values(), ids=STALE.keys())
def test_a_saved_step_the_environments_passed_cannot_continue_is_skipped(sb3, tmp_path, td3_saved, case):
    key, value = case
    path = _rewrite(td3_saved, tmp_path / "stale.zip", {key: value if isinstance(value, str) else _pickled(value)})
    with pytest.raises(
        zipsave.DecodeError, match=re.escape("where the 1 environment(s) passed step on from")
    ) as caught:
        zipsave.load(path, cls=sb3.TD3, env=_started_pendulum(sb3), device="cpu", force_reset=False, strict=True)
    assert caught.value.key == key
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape(f"`{key}`")):
        model = zipsave.load(path, cls=sb3.TD3, env=_started_pendulum(sb3), device="cpu", force_reset=False)
    assert getattr(model, key) is None
    model.learn(16, reset_num_timesteps=False)


def test_a_saved_step_the_environments_can_continue_is_kept(sb3, tmp_path, td3_saved):
    obs, starts = np.full((1, 3), 0.5, np.float32), np.zeros(1, bool)
    path = _rewrite(
        td3_saved, tmp_path / "kept.zip", {"_last_obs": _pickled(obs), "_last_episode_starts": _pickled(starts)}
    )
    model = zipsave.load(path, cls=sb3.TD3, env=_started_pendulum(sb3), device="cpu", force_reset=False, strict=True)
    assert (model._last_obs == obs).all() and (model._last_episode_starts == starts).all()
    model.learn(16, reset_num_timesteps=False)
    other = zipsave.load(path, cls=sb3.TD3, device="cpu", strict=True)  # no environments: nothing steps from it
    assert (other._last_obs == obs).all()


def test_restore_into_a_model_that_has_not_stepped_checks_the_saved_step(sb3, tmp_path, td3_saved):
    # the live model holds no _last_obs yet, so round eight's comparison had nothing to compare
    # with: restore set (3, 7), and learn(reset_num_timesteps=False) stepped on from it
    path = _rewrite(td3_saved, tmp_path / "stale.zip", {"_last_obs": _pickled(np.zeros((3, 7), np.float32))})
    kwargs = {"learning_starts": 4, "buffer_size": 64, "batch_size": 4, "policy_kwargs": {"net_arch": [8]}}
    model = sb3.TD3("MlpPolicy", _env(sb3, "Pendulum-v1"), device="cpu", seed=0, **kwargs)
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("`_last_obs`")):
        zipsave.restore(model, path, device="cpu")
    assert model._last_obs is None
    model.learn(16, reset_num_timesteps=False)


# -- loose variables: the tensor an optimizer steps is filled, never replaced ---------------------


def _with_variables(saved: bytes, path, variables: dict) -> str:
    with zipfile.ZipFile(io.BytesIO(saved)) as zf:
        items = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    out = io.BytesIO()
    torch.save(variables, out)
    items["pytorch_variables.pth"] = out.getvalue()
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw_bytes in items.items():
            zf.writestr(name, raw_bytes)
    return str(path)


def _small_sac(sb3):
    kwargs = {"learning_starts": 4, "buffer_size": 64, "batch_size": 4, "policy_kwargs": {"net_arch": [8]}}
    return sb3.SAC("MlpPolicy", _env(sb3, "Pendulum-v1"), device="cpu", seed=0, **kwargs)


LOG_ENT_COEF = {
    # the first learn() of the old tree's model: RuntimeError ('a Tensor with 3 elements cannot be
    # converted to Scalar', 'element 0 of tensors does not require grad') or AttributeError
    "three": lambda: torch.zeros(3),
    "zero-dim": lambda: torch.tensor(0.0),
    "empty": lambda: torch.zeros(0),
    "a-million-from-one": lambda: torch.zeros(1).expand(10**6),
    "number": lambda: 5,
}


@pytest.mark.parametrize("kind", LOG_ENT_COEF)
def test_a_variable_an_optimizer_steps_is_refused_unless_it_fits(sb3, tmp_path, sac_small, kind):
    import zipsave.sb3

    path = _with_variables(sac_small, tmp_path / "vars.zip", {"log_ent_coef": LOG_ENT_COEF[kind]()})
    words = re.escape("the variable `log_ent_coef` is ")
    with pytest.raises(zipsave.ParameterMismatchError, match=words) as caught:
        zipsave.load(path, cls=sb3.SAC, env=_env(sb3, "Pendulum-v1"), device="cpu")
    assert caught.value.member == "pytorch_variables.pth" and caught.value.key == "log_ent_coef"
    with zipsave.sb3.installed(), pytest.raises(zipsave.ParameterMismatchError, match=words):
        sb3.SAC.load(path, env=_env(sb3, "Pendulum-v1"), device="cpu")
    model = _small_sac(sb3)
    with pytest.raises(zipsave.ParameterMismatchError, match=words):
        zipsave.restore(model, path, device="cpu")


def test_a_variable_of_another_dtype_is_copied_into_the_stepped_tensor(sb3, tmp_path, sac_small):
    path = _with_variables(
        sac_small, tmp_path / "vars.zip", {"log_ent_coef": torch.full((1,), -0.5, dtype=torch.float64)}
    )
    model = zipsave.load(path, cls=sb3.SAC, env=_env(sb3, "Pendulum-v1"), device="cpu", strict=True)
    assert model.log_ent_coef.dtype == torch.float32 and model.log_ent_coef.item() == -0.5
    assert model.log_ent_coef is model.ent_coef_optimizer.param_groups[0]["params"][0]
    model.learn(16)


# -- VecNormalize: the settings it normalizes with ------------------------------------------------


def _normalized_pendulum(sb3):
    from stable_baselines3.common.vec_env import VecNormalize

    venv = VecNormalize(_env(sb3, "Pendulum-v1"))
    venv.reset()
    for _ in range(4):
        venv.step(np.zeros((1, 1)))
    return venv


def _edited(path, member: str, change: dict, out) -> str:
    with zipfile.ZipFile(path) as zf:
        items = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    raw = json.loads(items[member])
    raw.update(change)
    items[member] = json.dumps(raw).encode()
    with zipfile.ZipFile(out, "w") as zf:
        for name, raw_bytes in items.items():
            zf.writestr(name, raw_bytes)
    return str(out)


SETTINGS = {
    # the old tree loaded each; its first step raised TypeError or numpy's UFuncTypeError, or
    # returned NaN observations and rewards
    "clip_obs-text": ("clip_obs", "10"),
    "gamma-text": ("gamma", "0.9"),
    "gamma-nan": ("gamma", float("nan")),
    "epsilon-negative": ("epsilon", -1.0),
    "clip_reward-nan": ("clip_reward", float("nan")),
    "norm_obs-text": ("norm_obs", "x"),
}


@pytest.mark.parametrize("case", SETTINGS.values(), ids=SETTINGS.keys())
def test_vec_normalize_settings_of_another_kind_are_refused(sb3, tmp_path, case):
    from stable_baselines3.common.vec_env import VecNormalize

    import zipsave.sb3

    key, value = case
    with zipsave.sb3.installed():
        _normalized_pendulum(sb3).save(tmp_path / "vn.zip")
        path = _edited(tmp_path / "vn.zip", "data", {key: value}, tmp_path / "hostile.zip")
        with pytest.raises(zipsave.DecodeError, match=re.escape(f"`{key}` is ")) as caught:
            VecNormalize.load(path, _env(sb3, "Pendulum-v1"))
    assert caught.value.key == key
    # a model archive's vec_normalize/ folder: the same check, on both doors that read it
    model = sb3.PPO("MlpPolicy", _normalized_pendulum(sb3), n_steps=16, batch_size=8, device="cpu")
    zipsave.save(model, tmp_path / "m.zip", include=["vec_normalize"])
    path = _edited(tmp_path / "m.zip", "vec_normalize/data", {key: value}, tmp_path / "m-hostile.zip")
    with pytest.raises(zipsave.DecodeError, match=re.escape(f"`{key}` is ")) as caught:
        zipsave.load(path, cls=sb3.PPO, env=_env(sb3, "Pendulum-v1"), device="cpu", strict=True)
    assert caught.value.member == "vec_normalize/data"
    with zipsave.sb3.installed(), pytest.raises(zipsave.DecodeError, match=re.escape(f"`{key}` is ")):
        VecNormalize.load(path, _env(sb3, "Pendulum-v1"))


def test_vec_normalize_settings_sb3_takes_load(sb3, tmp_path):
    from stable_baselines3.common.vec_env import VecNormalize

    import zipsave.sb3

    with zipsave.sb3.installed():
        _normalized_pendulum(sb3).save(tmp_path / "vn.zip")
        change = {"clip_obs": float("inf"), "clip_reward": 5, "epsilon": 0.0, "training": False}
        path = _edited(tmp_path / "vn.zip", "data", change, tmp_path / "ok.zip")
        loaded = VecNormalize.load(path, _env(sb3, "Pendulum-v1"))
    assert loaded.clip_obs == float("inf") and loaded.training is False
    loaded.reset()
    obs, reward, _, _ = loaded.step(np.zeros((1, 1)))
    assert np.isfinite(obs).all() and np.isfinite(reward).all()
