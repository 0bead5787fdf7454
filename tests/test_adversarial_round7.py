"""Round seven of the adversarial suite: values a default load hands back that fail on first use
or allocate beyond the caller's limits (HER's episode bookkeeping, action noises of SB3 1.x and
of another number of envs, ``train_freq`` and the numbers SB3 trains with)."""

from __future__ import annotations

import base64
import io
import json
import pickle
import re
import zipfile

import numpy as np
import pytest

import zipsave

pytest.importorskip("stable_baselines3")

from models import bits_env, her_model  # noqa: E402
from stable_baselines3 import DQN, TD3  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402

import zipsave.sb3  # noqa: E402


def _rewrite(saved: bytes, path, *, data=None, members=None) -> str:
    """``saved`` with ``data`` keys replaced (a value is pickled as SB3 does; a ``raw`` wrapper
    is written as JSON) and ``members`` replaced (arrays as ``.npy``); no manifest."""
    with zipfile.ZipFile(io.BytesIO(saved)) as zf:
        items = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    if data:
        raw = json.loads(items["data"])
        for key, value in data.items():
            if isinstance(value, _Raw):
                raw[key] = value.value
            else:
                raw[key] = {
                    ":type:": f"<class '{type(value).__module__}.{type(value).__qualname__}'>",
                    ":serialized:": base64.b64encode(pickle.dumps(value)).decode(),
                }
        items["data"] = json.dumps(raw).encode()
    for name, value in (members or {}).items():
        out = io.BytesIO()
        np.save(out, value, allow_pickle=False)
        items[name] = out.getvalue()
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw_bytes in items.items():
            zf.writestr(name, raw_bytes)
    return str(path)


class _Raw:
    def __init__(self, value):
        self.value = value


# -- HER's episode bookkeeping ----------------------------------------------------------------


def _bits_env():
    return bits_env()


def _her_model(buffer_size=300):
    return her_model(buffer_size)


@pytest.fixture(scope="module")
def her_trained():
    model = _her_model()
    model.learn(42)  # stops inside an episode: loading ends it
    assert (model.replay_buffer._current_ep_start != model.replay_buffer.pos).any()
    return model


@pytest.fixture(scope="module")
def her_saved(her_trained):
    out = io.BytesIO()
    zipsave.save(her_trained, out, include=["replay_buffer"])
    return out.getvalue()


def _member_of(saved: bytes, array: str) -> str:
    with zipfile.ZipFile(io.BytesIO(saved)) as zf:
        state = json.loads(zf.read("replay_buffer/data"))
    return state["arrays"][":zipsave:"]["value"][array][":zipsave:"]["member"]


def _bookkeeping(her_trained, name):
    buffer = her_trained.replay_buffer
    if name == "_current_ep_start":
        return np.array([-(10**7)])  # the old tree allocated 80 MB for it (7.5 GiB for -10**9)
    if name == "ep_start":
        return np.full_like(buffer.ep_start, 10**12)
    short = buffer.ep_length.copy()
    short[: buffer.pos] = np.where(short[: buffer.pos] > 0, 1, 0)  # rows past an episode's first
    return short


@pytest.mark.parametrize("name", ["_current_ep_start", "ep_start", "ep_length"])
def test_her_bookkeeping_out_of_step_is_refused(tmp_path, her_trained, her_saved, name):
    # ending the unfinished episode at load ran `np.arange(_current_ep_start, pos)`: -10**9
    # allocated 7.5 GiB (MemoryError, or the memory taken); a start or length out of step with
    # its row loaded, and the first sample() raised numpy's `low >= high`
    member = _member_of(her_saved, name)
    path = _rewrite(her_saved, tmp_path / "her.zip", members={member: _bookkeeping(her_trained, name)})
    with pytest.raises(zipsave.DecodeError, match=re.escape("holds a HerReplayBuffer whose")) as caught:
        zipsave.load(path, cls=DQN, env=_bits_env(), device="cpu", strict=True)
    assert caught.value.key == name and caught.value.member == "replay_buffer/data"
    assert "where SB3 keeps" in str(caught.value)
    with pytest.warns(zipsave.SkippedEntryWarning, match="replay_buffer/data"):
        model = zipsave.load(path, cls=DQN, env=_bits_env(), device="cpu")
    assert model.replay_buffer.pos == 0 and not model.replay_buffer.ep_length.any()  # untouched
    model.learn(20)


HOSTILE_HER_PICKLES = {
    "_current_ep_start": np.array([-(10**7)]),
    "her_ratio": float("nan"),
    "goal_selection_strategy": "future",
    "n_sampled_goal": -0.5,
}


@pytest.mark.parametrize("name", HOSTILE_HER_PICKLES, ids=HOSTILE_HER_PICKLES)
def test_a_pickled_her_buffer_out_of_step_is_refused(tmp_path, her_trained, name):
    # SB3's own pickle under install() loaded; its first episode end (or truncate_last_trajectory)
    # allocated as above, and a NaN her_ratio or a strategy of text failed at the first sample()
    buffer = her_trained.replay_buffer
    old = getattr(buffer, name)
    setattr(buffer, name, HOSTILE_HER_PICKLES[name])
    try:
        her_trained.save_replay_buffer(tmp_path / "buffer.pkl")  # SB3's own pickle (not installed)
    finally:
        setattr(buffer, name, old)
    model = _her_model()
    with zipsave.sb3.installed(), pytest.raises(zipsave.DecodeError, match=re.escape(f"`{name}`")) as caught:
        model.load_replay_buffer(tmp_path / "buffer.pkl", truncate_last_traj=False)
    assert caught.value.key == name and "SB3 writes no such replay buffer" in str(caught.value)


def test_a_wrapped_her_buffer_sb3_wrote_loads(tmp_path):
    # the check must take what SB3 writes: a buffer that wrapped around, episodes across its end
    model = _her_model(buffer_size=30)
    model.learn(150)
    assert model.replay_buffer.full
    path = tmp_path / "wrapped.zip"
    zipsave.save(model, path, include=["replay_buffer"])
    loaded = zipsave.load(path, cls=DQN, env=_bits_env(), device="cpu", strict=True)
    assert (loaded.replay_buffer.ep_start == model.replay_buffer.ep_start).all()
    loaded.learn(20)
    model.save_replay_buffer(tmp_path / "wrapped.pkl")
    with zipsave.sb3.installed():
        _her_model(buffer_size=30).load_replay_buffer(tmp_path / "wrapped.pkl", truncate_last_traj=False)


# -- action noises: SB3 1.x's, and one for another number of envs ------------------------------


def _pendulums(n_envs=1):
    return make_vec_env("Pendulum-v1", n_envs=n_envs, seed=0)


def _sb3_1x(noise):
    """``noise`` as SB3 1.x pickled it: without the ``_dtype`` SB3 2.0 added."""
    del noise._dtype
    return noise


def _old_noises():
    from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise, VectorizedActionNoise

    return {
        "normal": lambda: _sb3_1x(NormalActionNoise(np.zeros(1), np.full(1, 0.1))),
        "ornstein-uhlenbeck": lambda: _sb3_1x(OrnsteinUhlenbeckActionNoise(np.zeros(1), np.full(1, 0.1))),
        "vectorized": lambda: VectorizedActionNoise(_sb3_1x(NormalActionNoise(np.zeros(1), np.full(1, 0.1))), 2),
    }


@pytest.mark.parametrize("kind", ["normal", "ornstein-uhlenbeck", "vectorized"])
def test_an_sb3_1x_noise_loads_and_learns(tmp_path, td3_saved, kind):
    # SB3 1.x pickled its noises without `_dtype`; SB3 2.x's own load takes them and its first
    # learn step raises AttributeError ('NormalActionNoise' object has no attribute '_dtype'),
    # and so did zipsave's
    noise = _old_noises()[kind]()  # a vectorized one's copies lack `_dtype` too
    path = _rewrite(td3_saved, tmp_path / "old.zip", data={"action_noise": noise})
    n_envs = 2 if kind == "vectorized" else 1
    report = zipsave.LoadReport()
    model = zipsave.load(path, cls=TD3, env=_pendulums(n_envs), device="cpu", strict=True, report=report)
    model.learn(8)
    assert any("pickled by SB3 1.x" in note for note in report.notes)
    inner = [model.action_noise] if kind != "vectorized" else model.action_noise.noises
    assert all(n._dtype is np.float64 for n in inner)
    with zipsave.sb3.installed():
        TD3.load(path, env=_pendulums(n_envs), device="cpu").learn(8)


def test_an_sb3_1x_scalar_noise_is_refused(tmp_path, td3_saved):
    # of scalars numpy draws a Python float, which SB3 2.x cannot cast (with or without `_dtype`)
    from stable_baselines3.common.noise import NormalActionNoise

    path = _rewrite(td3_saved, tmp_path / "scalar.zip", data={"action_noise": _sb3_1x(NormalActionNoise(0.0, 0.1))})
    with pytest.raises(zipsave.DecodeError, match="scalars") as caught:
        zipsave.load(path, cls=TD3, env=_pendulums(), device="cpu", strict=True)
    assert caught.value.key == "action_noise"


@pytest.mark.parametrize("n_envs", [1, 3])
def test_a_vectorized_noise_for_other_envs_is_made_for_the_envs_passed(tmp_path, td3_saved, n_envs):
    # a VectorizedActionNoise for 2 envs and an env of 1 or 3: SB3 (its own load too) stacked 2
    # noises onto the actions and its first learn step raised ValueError ('cannot reshape array
    # of size 2 into shape (1,1)', 'operands could not be broadcast together')
    from stable_baselines3.common.noise import NormalActionNoise, VectorizedActionNoise

    noise = VectorizedActionNoise(NormalActionNoise(np.zeros(1), np.full(1, 0.1)), 2)
    path = _rewrite(td3_saved, tmp_path / "vectorized.zip", data={"action_noise": noise})
    report = zipsave.LoadReport()
    model = zipsave.load(path, cls=TD3, env=_pendulums(n_envs), device="cpu", strict=True, report=report)
    model.learn(8)
    assert any("VectorizedActionNoise for 2 envs, and the env passed has" in note for note in report.notes)
    assert getattr(model.action_noise, "n_envs", 1) == n_envs
    with zipsave.sb3.installed():
        TD3.load(path, env=_pendulums(n_envs), device="cpu").learn(8)
    kept = zipsave.load(path, cls=TD3, env=_pendulums(2), device="cpu", strict=True)
    assert kept.action_noise.n_envs == 2  # the same envs: as it was saved


# -- train_freq and the numbers SB3 trains with -------------------------------------------------


def _decimal(text):
    return _Raw({":type:": "<class 'decimal.Decimal'>", ":zipsave:": {"kind": "decimal", "value": text}})


def _train_freq(frequency, unit="step"):
    from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

    return TrainFreq(frequency, TrainFrequencyUnit(unit) if unit in ("step", "episode") else unit)


HOSTILE_VALUES = {
    "train_freq-0": ("train_freq", _Raw(0)),
    "train_freq-negative": ("train_freq", _Raw(-3)),
    "train_freq-of-0": ("train_freq", lambda: _train_freq(0)),
    "train_freq-of-text": ("train_freq", lambda: _train_freq("abc")),
    "train_freq-unit-text": ("train_freq", lambda: _train_freq(1, "step!")),
    "train_freq-of-nan": ("train_freq", lambda: _train_freq(float("nan"))),
    "gamma-decimal-snan": ("gamma", _decimal("sNaN")),
    "batch_size-decimal-nan": ("batch_size", _decimal("NaN")),
    "tau-text": ("tau", _Raw("0.005")),
    "verbose-decimal-snan": ("verbose", _decimal("-sNaN7")),
    "_n_updates-decimal-infinity": ("_n_updates", _decimal("Infinity")),
    "batch_size-huge": ("batch_size", _Raw(2**70)),
}


@pytest.mark.parametrize("case", HOSTILE_VALUES.values(), ids=HOSTILE_VALUES.keys())
def test_a_value_the_first_learn_cannot_use_is_skipped(tmp_path, td3_saved, case):
    # each loaded, and the first learn() raised SB3's AssertionError ('Should at least collect
    # one step or episode'), TypeError, ValueError or decimal.InvalidOperation; now the entry is
    # skipped (the model keeps its default) with a warning, and strict refuses it
    key, value = case
    value = value() if callable(value) else value
    path = _rewrite(td3_saved, tmp_path / "values.zip", data={key: value})
    with pytest.raises(zipsave.DecodeError, match=re.escape("where ")) as caught:
        zipsave.load(path, cls=TD3, env=_pendulums(), device="cpu", strict=True)
    assert caught.value.key == key and caught.value.member == "data"
    assert "keeps" in str(caught.value)
    fresh = TD3("MlpPolicy", _pendulums(), device="cpu")
    for load in (
        lambda: zipsave.load(path, cls=TD3, env=_pendulums(), device="cpu"),
        lambda: TD3.load(path, env=_pendulums(), device="cpu"),
    ):
        with zipsave.sb3.installed(), pytest.warns(zipsave.SkippedEntryWarning, match=re.escape(f"`{key}`")):
            model = load()
        if key != "train_freq":
            assert getattr(model, key) == getattr(fresh, key)  # the default
        model.learn(8)


def test_values_sb3_writes_load(tmp_path, td3_saved):
    # what real libraries wrote: SB3 1.x's integer train_freq, numpy numbers, None before learn
    from stable_baselines3.common.type_aliases import TrainFrequencyUnit

    values = {"train_freq": _Raw(4), "gamma": np.float32(0.98), "start_time": _Raw(None), "verbose": _Raw(True)}
    path = _rewrite(td3_saved, tmp_path / "real.zip", data=values)
    model = zipsave.load(path, cls=TD3, env=_pendulums(), device="cpu", strict=True)
    assert model.train_freq == (4, TrainFrequencyUnit.STEP)
    model.learn(8)


def test_a_her_n_sampled_goal_the_buffer_cannot_use_is_skipped(tmp_path, her_saved):
    # replay_buffer_kwargs with n_sampled_goal=-0.5 or NaN loaded (HerReplayBuffer built), and
    # the first sample() raised ValueError ('cannot reshape array of size 0', 'cannot convert
    # float NaN to integer')
    for goals in (-0.5, float("nan")):
        path = _rewrite(her_saved, tmp_path / "goals.zip", data={"replay_buffer_kwargs": {"n_sampled_goal": goals}})
        with pytest.raises(zipsave.DecodeError, match=re.escape("`n_sampled_goal` =")) as caught:
            zipsave.load(path, cls=DQN, env=_bits_env(), device="cpu", strict=True)
        assert caught.value.key == "replay_buffer_kwargs"
        with pytest.warns(zipsave.SkippedEntryWarning, match="replay_buffer_kwargs"):
            model = zipsave.load(path, cls=DQN, env=_bits_env(), device="cpu")
        model.learn(60)


# -- instance attributes that stand in for methods ----------------------------------------------


def test_a_pickled_attribute_named_as_a_method_is_refused(tmp_path, td3_saved):
    # BUILD set `reset` on a VectorizedActionNoise and `sample` on a ReplayBuffer: each loaded,
    # and SB3 called them in place of the methods (`action_noise.reset(indices=[0])` made an
    # OrderedDict; `replay_buffer.sample(batch_size)` raised TypeError at the first train)
    import collections

    from stable_baselines3.common.noise import NormalActionNoise, VectorizedActionNoise

    noise = VectorizedActionNoise(NormalActionNoise(np.zeros(1), np.full(1, 0.1)), 2)
    noise.reset = collections.OrderedDict
    path = _rewrite(td3_saved, tmp_path / "noise.zip", data={"action_noise": noise})
    with pytest.raises(zipsave.DecodeError, match=re.escape("would stand in for its method")) as caught:
        zipsave.load(path, cls=TD3, env=_pendulums(2), device="cpu", strict=True)
    assert caught.value.key == "action_noise" and "`reset`" in str(caught.value)

    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, learning_starts=0, device="cpu")
    model.learn(8)
    model.replay_buffer.sample = collections.OrderedDict
    model.save_replay_buffer(tmp_path / "buffer.pkl")  # SB3's own pickle (not installed)
    fresh = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, learning_starts=0, device="cpu")
    with zipsave.sb3.installed(), pytest.raises(zipsave.DecodeError, match=re.escape("`sample`")):
        fresh.load_replay_buffer(tmp_path / "buffer.pkl")
    assert "sample" not in vars(fresh.replay_buffer)


# -- zipsave.restore into a live SB3 model: the checks of load ----------------------------------


def _live_td3(n_envs=1):
    kwargs = {"learning_starts": 4, "buffer_size": 64, "batch_size": 4, "policy_kwargs": {"net_arch": [8]}}
    return TD3("MlpPolicy", _pendulums(n_envs), device="cpu", seed=0, **kwargs)


LIVE_PARTS = {
    "env": _Raw("Pendulum-v1"),
    "policy": _Raw({"a": 1}),
    "replay_buffer": _Raw(None),
    "_vec_normalize_env": _Raw(3),
    "device": _Raw("meta"),
}


@pytest.mark.parametrize("key", LIVE_PARTS, ids=LIVE_PARTS)
def test_restore_keeps_the_live_parts_of_a_model(tmp_path, td3_saved, key):
    # restore set them from `data` on the live model: env a string, policy a dict (left so when
    # the state dict then failed), replay_buffer None; the next learn() raised AttributeError
    path = _rewrite(td3_saved, tmp_path / "live.zip", data={key: LIVE_PARTS[key]})
    model = _live_td3()
    before = getattr(model, key)
    if LIVE_PARTS[key].value is None:  # as SB3 1.x saved `env`: left out without a word
        zipsave.restore(model, path, device="cpu", strict=True)
    else:
        with pytest.raises(zipsave.DecodeError, match=re.escape("is a live part of the model")) as caught:
            zipsave.restore(model, path, device="cpu", strict=True)
        assert caught.value.key == key
        with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape(f"`{key}`")):
            zipsave.restore(model, path, device="cpu")
    assert getattr(model, key) is before
    model.learn(8)


def test_restore_applies_the_checks_of_load(tmp_path, td3_saved):
    # restore set an `lr_schedule` that is a class (SB3 calls it: a class of the allowlist was
    # constructed), a TrainFreq of 0 and an SB3 1.x noise without `_dtype` on the live model
    from stable_baselines3.common.noise import NormalActionNoise

    path = _rewrite(td3_saved, tmp_path / "class.zip", data={"lr_schedule": np.float64})
    with pytest.raises(zipsave.DecodeError, match=re.escape("is a schedule SB3 calls, found the class")):
        zipsave.restore(_live_td3(), path, device="cpu")
    path = _rewrite(
        td3_saved,
        tmp_path / "values.zip",
        data={"train_freq": _train_freq(0), "action_noise": _sb3_1x(NormalActionNoise(np.zeros(1), np.full(1, 0.1)))},
    )
    model = _live_td3()
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("`train_freq`")):
        zipsave.restore(model, path, device="cpu")
    assert model.train_freq.frequency == 1 and model.action_noise._dtype is np.float64
    model.learn(8)


# -- archive values that refuse comparison --------------------------------------------------------


def test_a_buffer_setting_that_refuses_comparison_skips_the_buffer(tmp_path, her_saved):
    # replay_buffer/data's buffer_size of Decimal('sNaN'): comparing it with the model's raised
    # InvalidOperation, and the whole load failed ('could not be read'), naming no member or key
    with zipfile.ZipFile(io.BytesIO(her_saved)) as zf:
        state = json.loads(zf.read("replay_buffer/data"))
    state["buffer_size"] = _decimal("sNaN").value
    path = tmp_path / "setting.zip"
    with zipfile.ZipFile(io.BytesIO(her_saved)) as src, zipfile.ZipFile(path, "w") as zf:
        for name in src.namelist():
            if name != "manifest.json":
                zf.writestr(name, json.dumps(state) if name == "replay_buffer/data" else src.read(name))
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("buffer_size=Decimal('sNaN')")):
        model = zipsave.load(path, cls=DQN, env=_bits_env(), device="cpu")
    assert model.replay_buffer.pos == 0


def test_saved_policy_kwargs_that_refuse_comparison_are_named(tmp_path, td3_saved):
    path = _rewrite(td3_saved, tmp_path / "kwargs.zip", data={"policy_kwargs": {"net_arch": [_decimal_value("sNaN")]}})
    with pytest.raises(zipsave.ParameterMismatchError) as caught:
        zipsave.load(path, cls=TD3, env=_pendulums(), device="cpu", policy_kwargs={"net_arch": [8]})
    assert caught.value.key == "policy_kwargs"


def _decimal_value(text):
    import decimal

    return decimal.Decimal(text)


def test_an_old_her_argument_is_quoted_as_saved(tmp_path, her_saved):
    # SB3 1.x's online_sampling of something other than True was reported as
    # `online_sampling=False` whatever it held
    path = _rewrite(her_saved, tmp_path / "old.zip", data={"replay_buffer_kwargs": {"online_sampling": [1]}})
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("`online_sampling=[1]`")):
        zipsave.load(path, cls=DQN, env=_bits_env(), device="cpu")


def test_a_published_pre_1_0_sac_collects_by_episodes(tmp_path):
    # the RL Zoo's SAC agents of SB3 < 1.0 saved train_freq=-1 with n_episodes_rollout=1 (one
    # episode per rollout); SB3 2.x's own load and zipsave's gave TrainFreq(-1, "step"), and
    # the first learn() raised AssertionError ('Should at least collect one step or episode')
    import pathlib

    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.type_aliases import TrainFrequencyUnit

    path = pathlib.Path(__file__).parent / "data" / "rl_zoo" / "sac_Pendulum-v1.zip"
    report = zipsave.LoadReport()
    env = gym.make("Pendulum-v1")
    model = zipsave.load(path, cls=SAC, env=env, device="cpu", report=report)
    assert model.train_freq == (1, TrainFrequencyUnit.EPISODE)  # what learn() collects by (SB3 >= 1.0)
    assert any("n_episodes_rollout=1" in note for note in report.notes)
