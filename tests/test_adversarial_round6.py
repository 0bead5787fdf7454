"""Round six of the adversarial suite: values a default load hands back that fail on first use
(SB3's action noises), and messages about huge integers a pickle holds (a replay buffer's
``pos`` of 5 000 digits was refused with Python's limit on integer text, naming nothing)."""

from __future__ import annotations

import pathlib
import re
import sys

import numpy as np
import pytest

import zipsave

pytest.importorskip("stable_baselines3")

from stable_baselines3 import DQN  # noqa: E402

import zipsave.sb3  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

HUGE = 10**5000  # 16 610 bits: within zipsave's integer bound, past Python's 4 300 digits of text


@pytest.fixture(scope="module")
def buffer_model():
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, learning_starts=0, device="cpu", seed=0)
    model.learn(40)
    return model


def _side_pickle(folder: pathlib.Path, buffer, **changes) -> str:
    from stable_baselines3.common.save_util import save_to_pkl

    old = {name: getattr(buffer, name) for name in changes}
    for name, value in changes.items():
        setattr(buffer, name, value)
    path = str(folder / "buffer.pkl")
    try:
        save_to_pkl(path, buffer)  # SB3's own pickle (not installed)
    finally:
        for name, value in old.items():
            setattr(buffer, name, value)
    return path


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("pos", HUGE, "0 <= pos < 64"),
        ("pos", -HUGE, "0 <= pos < 64"),
        ("buffer_size", -HUGE, "an integer of at least 1"),
        ("n_envs", -HUGE, "an integer of at least 1"),
        ("full", HUGE, "a bool"),
    ],
    ids=["pos", "negative-pos", "buffer_size", "n_envs", "full"],
)
def test_a_huge_integer_in_a_pickled_buffer_is_named(tmp_path, buffer_model, name, value, expected):
    # `pos` of 5 000 digits was refused with "Exceeds the limit (4300 digits) for integer string
    # conversion": the message formatted the value with repr(), which raised inside the check
    path = _side_pickle(tmp_path, buffer_model.replay_buffer, **{name: value})
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, device="cpu")
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.DecodeError) as caught:
            model.load_replay_buffer(path)
    message = str(caught.value)
    assert caught.value.key == name and f"`{name}`" in message and expected in message
    assert "integer of 16610 bits" in message and "4300" not in message
    assert path in message


def test_a_huge_buffer_size_is_shown_by_its_size(tmp_path, buffer_model):
    path = _side_pickle(tmp_path, buffer_model.replay_buffer, buffer_size=HUGE)
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, device="cpu")
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.DecodeError) as caught:
            model.load_replay_buffer(path)
    expected = "where SB3 keeps (buffer_size, n_envs) = (an integer of 16610 bits, 1) rows"
    assert caught.value.key == "observations" and expected in str(caught.value)


def test_a_huge_count_in_pickled_statistics_is_named(tmp_path):
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    vec = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]))
    vec.obs_rms.count = HUGE
    path = str(tmp_path / "vec.pkl")
    vec.save(path)  # SB3's own pickle (not installed)
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.DecodeError, match=re.escape("`obs_rms.count` is an integer of 16610 bits")):
            VecNormalize.load(path, DummyVecEnv([lambda: gym.make("Pendulum-v1")]))


# -- SB3's action noises: what the first learn step needs ------------------------------------


def _with_noise(tmp_path, saved: bytes, noise) -> str:
    return _with_value(tmp_path, saved, "action_noise", noise)


def _with_value(tmp_path, saved: bytes, key: str, value) -> str:
    import base64
    import io
    import json
    import pickle
    import zipfile

    with zipfile.ZipFile(io.BytesIO(saved)) as zf:
        items = {n: zf.read(n) for n in zf.namelist()}
    data = json.loads(items["data"])
    data[key] = {
        ":type:": f"<class '{type(value).__module__}.{type(value).__qualname__}'>",
        ":serialized:": base64.b64encode(pickle.dumps(value)).decode(),
    }
    items["data"] = json.dumps(data).encode()
    path = str(tmp_path / f"{key}.zip")
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in items.items():
            zf.writestr(name, raw)
    return path


def _normal(mu=(0.0,), sigma=(0.1,), **attributes):
    from stable_baselines3.common.noise import NormalActionNoise

    noise = NormalActionNoise(np.asarray(mu, dtype=float), np.asarray(sigma, dtype=float))
    vars(noise).update(attributes)
    return noise


def _ou(**attributes):
    from stable_baselines3.common.noise import OrnsteinUhlenbeckActionNoise

    noise = OrnsteinUhlenbeckActionNoise(np.zeros(1), np.full(1, 0.1))
    vars(noise).update(attributes)
    return noise


def _vectorized(**attributes):
    from stable_baselines3.common.noise import VectorizedActionNoise

    noise = VectorizedActionNoise(_normal(), 2)
    vars(noise).update(attributes)
    return noise


def _no_sigma():
    noise = _normal()
    del noise._sigma
    return noise


HOSTILE_NOISES = {
    "shapes-that-do-not-broadcast": lambda: _normal((0.0, 0.0), (0.1, 0.1, 0.1)),
    "shapes-that-broadcast-to-a-square": lambda: _normal(np.zeros((1, 500)), np.ones((500, 1))),
    "negative-sigma": lambda: _normal(sigma=(-0.1,)),
    "nan-sigma": lambda: _normal(sigma=(float("nan"),)),
    "infinite-mean": lambda: _normal(mu=(float("inf"),)),
    "mean-a-list": lambda: _normal(_mu=[0.0]),
    "huge-integer-sigma": lambda: _normal(_sigma=HUGE),
    "no-sigma": _no_sigma,
    "scalars-drawing-a-float": lambda: _normal(_mu=0.0, _sigma=0.1),
    "ou-mean-a-float": lambda: _ou(_mu=0.0, noise_prev=0.0),
    "dtype-of-bytes": lambda: _normal(_dtype=np.dtype("S3")),
    "ou-previous-of-another-shape": lambda: _ou(noise_prev=np.zeros(5)),
    "ou-negative-dt": lambda: _ou(_dt=-0.01),
    "ou-initial-noise-nan": lambda: _ou(initial_noise=np.full(1, np.nan)),
    "vectorized-n_envs-disagrees": lambda: _vectorized(n_envs=3),
    "vectorized-n_envs-huge": lambda: _vectorized(n_envs=HUGE),
    "vectorized-noises-of-another-kind": lambda: _vectorized(_noises=[_ou(), _ou()]),
    "vectorized-noises-of-other-shapes": lambda: _vectorized(_noises=[_normal(), _normal((0.0, 0.0), (1.0, 1.0))]),
    "vectorized-noise-refused-inside": lambda: _vectorized(_noises=[_normal(), _normal(sigma=(-1.0,))]),
}


@pytest.mark.parametrize("make", HOSTILE_NOISES.values(), ids=HOSTILE_NOISES.keys())
def test_a_noise_its_first_call_would_fail_on_is_refused(tmp_path, td3_saved, make):
    # a pickle sets a noise's state as it is: each of these loaded, and the first learn step
    # (SB3 adds the noise to every action, warm-up too) raised numpy's errors or drew NaN
    from stable_baselines3 import TD3

    path = _with_noise(tmp_path, td3_saved, make())
    with pytest.raises(zipsave.DecodeError, match="action") as caught:
        zipsave.load(path, cls=TD3, device="cpu", strict=True)
    assert caught.value.key == "action_noise"
    with pytest.warns(zipsave.SkippedEntryWarning, match="action_noise"):
        data, _, _ = zipsave.load_archive(path, device="cpu")
    assert "action_noise" not in data  # load_archive hands back no such noise either
    with pytest.warns(zipsave.SkippedEntryWarning, match="action_noise"):
        model = zipsave.load(path, cls=TD3, device="cpu")
    assert model.action_noise is None


def test_a_noise_of_another_shape_than_the_actions_is_refused(tmp_path, td3_saved):
    # consistent in itself, but Pendulum's actions are of shape (1,): SB3's first step added a
    # noise of shape (3,) to them and stored actions of shape (1, 3) in the buffer
    from stable_baselines3 import TD3

    path = _with_noise(tmp_path, td3_saved, _normal((0.0, 0.0, 0.0), (0.1, 0.1, 0.1)))
    message = re.escape("it draws noise of shape (3,), which does not fit 1 action(s) of shape (1,)")
    with pytest.raises(zipsave.DecodeError, match=message) as caught:
        zipsave.load(path, cls=TD3, device="cpu")
    assert caught.value.key == "action_noise"
    with zipsave.sb3.installed(), pytest.raises(zipsave.DecodeError, match=message):
        TD3.load(path, device="cpu")


REAL_NOISES = {
    "normal": lambda: _normal(),
    "normal-of-a-float-sigma": lambda: _normal(_sigma=0.1),
    "ou-of-numpy-scalars": lambda: _ou(_mu=np.float64(0.0), _sigma=0.1, noise_prev=np.float64(0.0)),
    "normal-float64": lambda: _normal(_dtype=np.float64),
    "ou": lambda: _ou(),
    "vectorized": lambda: _vectorized(),
}


@pytest.mark.parametrize("make", REAL_NOISES.values(), ids=REAL_NOISES.keys())
def test_noises_sb3_writes_load_and_learn(tmp_path, td3_saved, make):
    from stable_baselines3 import TD3
    from stable_baselines3.common.env_util import make_vec_env

    path = _with_noise(tmp_path, td3_saved, make())
    n_envs = 2 if "Vectorized" in type(make()).__name__ else 1
    model = zipsave.load(path, cls=TD3, device="cpu", strict=True, env=make_vec_env("Pendulum-v1", n_envs))
    assert type(model.action_noise) is type(make())
    model.learn(8)


# -- SB3's schedule objects: what their first call needs --------------------------------------


@pytest.fixture(scope="module")
def ppo_saved(tmp_path_factory):
    from stable_baselines3 import PPO

    path = tmp_path_factory.mktemp("ppo") / "ppo.zip"
    kwargs = {"n_steps": 32, "batch_size": 32, "n_epochs": 1, "policy_kwargs": {"net_arch": [8]}}
    PPO("MlpPolicy", "CartPole-v1", device="cpu", seed=0, **kwargs).save(path)
    return path.read_bytes()


def _float_schedule(inner):
    from stable_baselines3.common.utils import FloatSchedule

    schedule = FloatSchedule(0.2)
    schedule.value_schedule = inner
    return schedule


def _constant(val):
    from stable_baselines3.common.utils import ConstantSchedule

    schedule = ConstantSchedule(0.2)
    schedule.val = val
    return schedule


def _linear(**attributes):
    from stable_baselines3.common.utils import LinearSchedule

    schedule = LinearSchedule(0.2, 0.1, 0.5)
    vars(schedule).update(attributes)
    return schedule


HOSTILE_SCHEDULES = {
    "constant-text": lambda: _float_schedule(_constant("abc")),
    "constant-huge-integer": lambda: _float_schedule(_constant(HUGE)),
    "constant-list": lambda: _float_schedule(_constant([0.2])),
    "constant-nan": lambda: _float_schedule(_constant(float("nan"))),
    "linear-text": lambda: _float_schedule(_linear(end="x")),
    "linear-missing": lambda: _float_schedule(_linear(start=None)),
    "wraps-bytearray": lambda: _float_schedule(bytearray),
    "wraps-a-class": lambda: _float_schedule(type(_constant(0.2))),
    "wraps-nothing-callable": lambda: _float_schedule(0.2),
}


@pytest.mark.parametrize("make", HOSTILE_SCHEDULES.values(), ids=HOSTILE_SCHEDULES.keys())
def test_a_schedule_its_first_call_would_fail_on_is_skipped(tmp_path, ppo_saved, make):
    # PPO's clip_range loaded as it was pickled, and the first train() raised ValueError,
    # OverflowError or TypeError from float(); now the entry is skipped (the default is used)
    import gymnasium as gym
    from stable_baselines3 import PPO

    path = _with_value(tmp_path, ppo_saved, "clip_range", make())
    with pytest.raises(zipsave.DecodeError) as caught:
        zipsave.load(path, cls=PPO, device="cpu", strict=True)
    assert caught.value.key == "clip_range"
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("falls back to `clip_range=FloatSchedule")):
        model = zipsave.load(path, cls=PPO, device="cpu", env=gym.make("CartPole-v1"))
    model.learn(32)


def test_schedules_sb3_writes_load(tmp_path, ppo_saved):
    import gymnasium as gym
    from stable_baselines3 import PPO

    for schedule in (_float_schedule(_constant(0.1)), _float_schedule(_linear()), _float_schedule(_constant(1))):
        path = _with_value(tmp_path, ppo_saved, "clip_range", schedule)
        model = zipsave.load(path, cls=PPO, device="cpu", strict=True, env=gym.make("CartPole-v1"))
        model.learn(32)


# -- the command line on what a load returns --------------------------------------------------


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("key", ["big", "nested", "kept"])
def test_read_prints_an_integer_of_5000_digits(tmp_path, capsys, key, as_json):
    # zipsave saves and loads integers up to 131 072 bits; `zipsave read` of one past Python's
    # 4 300 digits of text printed "unexpected ValueError ... please report this as a zipsave bug"
    import collections

    from zipsave.cli import main

    path = str(tmp_path / "big.zip")
    zipsave.save({"big": HUGE, "nested": [(-HUGE,)], "kept": collections.OrderedDict(a=HUGE)}, path)
    assert main(["read", path, key, *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    assert "1" + "0" * 5000 in out
    assert sys.get_int_max_str_digits() == 4300  # the limit is the process's again


def test_a_json_integer_past_the_interpreters_limit_is_named(tmp_path):
    # a writer that lifted Python's limit writes a 5 001-digit literal; the refusal quoted
    # Python's own message ("Exceeds the limit (4300 digits)...") and named no place
    import zipfile

    path = str(tmp_path / "literal.zip")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", b'{"lr": 0.1,\n "big": 1' + b"0" * 5000 + b"}")
    with pytest.raises(zipsave.DecodeError) as caught:
        zipsave.load_archive(path)
    message = str(caught.value)
    assert "an integer literal of 5001 digits (line 2)" in message and "Exceeds" not in message
    assert caught.value.member == "data"


@pytest.fixture(scope="module")
def dqn_saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("dqn") / "dqn.zip"
    DQN("MlpPolicy", "CartPole-v1", buffer_size=64, device="cpu", policy_kwargs={"net_arch": [8]}).save(path)
    return path.read_bytes()


def test_a_huge_saved_env_is_noted_by_its_size(tmp_path, dqn_saved):
    # SB3's `env` entry is information only; its note formatted str(env), which raised
    # "Exceeds the limit (4300 digits)" for a pickled integer and refused the archive
    path = _with_value(tmp_path, dqn_saved, "env", HUGE)
    model = zipsave.load(path, cls=DQN, device="cpu")
    assert model.env is None


@pytest.mark.parametrize("key", ["n_envs", "buffer_size"])
def test_a_huge_model_size_is_refused_by_its_size(tmp_path, dqn_saved, key):
    # the estimate of what SB3 would build formatted its numbers, and raised the same ValueError
    path = _with_value(tmp_path, dqn_saved, key, HUGE)
    for load in (lambda: zipsave.load(path, cls=DQN, device="cpu"), lambda: DQN.load(path, device="cpu")):
        with zipsave.sb3.installed(), pytest.raises(zipsave.ArchiveLimitError) as caught:
            load()
        assert caught.value.key == "buffer_size" and "integer of 16610 bits" in str(caught.value)
        assert "more than 2**166" in str(caught.value) and "4300" not in str(caught.value)


def test_a_noise_listed_many_times_is_checked_once():
    # a VectorizedActionNoise listing one noise of 40 000 numbers 40 000 times (720 KB of
    # pickle) had each entry checked again: 3 s of CPU, quadratic in the pickle's size
    import pickle
    import time

    from zipsave._trust import TrustPolicy, restricted_loads

    noise = _normal(np.zeros(40_000), np.ones(40_000))
    vectorized = _vectorized(n_envs=40_000, _base_noise=noise, _noises=[noise] * 40_000)
    start = time.process_time()
    loaded = restricted_loads(pickle.dumps(vectorized), TrustPolicy.make())
    assert time.process_time() - start < 1.0
    assert len(loaded.noises) == 40_000


@pytest.mark.parametrize("key", ["pos", "buffer_size"])
def test_a_huge_integer_in_an_archived_buffer_is_shown_by_its_size(tmp_path, buffer_model, key):
    # replay_buffer/ in a model archive: the refusal formatted pos or buffer_size with repr()
    import base64
    import io
    import json
    import pickle
    import zipfile

    buffer = io.BytesIO()
    zipsave.save(buffer_model, buffer, include=["replay_buffer"])
    with zipfile.ZipFile(buffer) as zf:
        items = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    state = json.loads(items["replay_buffer/data"])
    state[key] = {":type:": "<class 'int'>", ":serialized:": base64.b64encode(pickle.dumps(HUGE)).decode()}
    items["replay_buffer/data"] = json.dumps(state).encode()
    path = str(tmp_path / "buffer.zip")
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in items.items():
            zf.writestr(name, raw)
    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=64, device="cpu")
    with zipsave.sb3.installed(), pytest.raises(zipsave.DecodeError) as caught:
        model.load_replay_buffer(path)
    assert f"{key}=an integer of 16610 bits" in str(caught.value) and "4300" not in str(caught.value)


@pytest.mark.parametrize("keys", [["a", "c"], ["a", "zz"]], ids=["real", "unknown-key"])
def test_pickled_statistics_name_only_keys_the_observations_have(tmp_path, keys):
    # VecNormalize.load of SB3's pickle took statistics of `zz`, a key its Dict observation
    # space lacks; the first reset() raised KeyError('zz')
    import gymnasium as gym
    from stable_baselines3.common.running_mean_std import RunningMeanStd
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    class DictEnv(gym.Env):
        observation_space = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,)), "c": gym.spaces.Box(-1, 1, ())})
        action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0.0, False, False, {}

    vec = VecNormalize(DummyVecEnv([DictEnv]), norm_obs_keys=["a", "c"])
    vec.norm_obs_keys = keys
    vec.obs_rms = {key: RunningMeanStd(shape=(2,) if key == "a" else ()) for key in keys}
    path = str(tmp_path / "vec.pkl")
    vec.save(path)  # SB3's own pickle (not installed)
    with zipsave.sb3.installed():
        if keys[1] == "zz":
            with pytest.raises(zipsave.DecodeError, match=re.escape("statistics of ['zz'], which its observation")):
                VecNormalize.load(path, DummyVecEnv([DictEnv]))
        else:
            VecNormalize.load(path, DummyVecEnv([DictEnv])).reset()
