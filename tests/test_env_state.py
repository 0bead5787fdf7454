"""zipsave.EnvState: live environments' state in an app state (gymnasium Env, SyncVectorEnv and
its wrappers, SB3 DummyVecEnv and VecNormalize), saved without pickle and restored so that the
resumed run steps exactly as the run that never stopped."""

from __future__ import annotations

import collections
import io
import os
import pickletools
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import zipsave

REPO = Path(__file__).resolve().parents[1]
GYM_1 = int(gym.__version__.split(".")[0]) >= 1


def cartpole_envs(n=2):
    def thunk():
        env = gym.make("CartPole-v1")
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = gym.wrappers.NormalizeObservation(env)
        return gym.wrappers.NormalizeReward(env)

    return gym.vector.SyncVectorEnv([thunk] * n)


def pendulum_env():
    env = gym.make("Pendulum-v1")
    env = gym.wrappers.RecordEpisodeStatistics(env)
    return gym.wrappers.NormalizeObservation(env)


def vector_wrapped_envs(n=2):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    envs = gym.wrappers.vector.NormalizeObservation(envs)
    return gym.wrappers.vector.NormalizeReward(envs)


def sb3_envs():
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    return VecNormalize(make_vec_env("Pendulum-v1", n_envs=2, seed=0))


MAKERS = {
    "sync-vector-cartpole": cartpole_envs,
    "single-pendulum": pendulum_env,
    "vector-wrappers": vector_wrapped_envs,
    "sb3-vecnormalize": sb3_envs,
}


def maker(name):
    if name == "vector-wrappers" and not GYM_1:
        pytest.skip("gymnasium.wrappers.vector is gymnasium 1.x (0.29 has per-env wrappers, tested above)")
    if name == "sb3-vecnormalize":
        pytest.importorskip("stable_baselines3")
    return MAKERS[name]


def is_sb3(env):
    return not isinstance(env, (gym.Env, gym.vector.VectorEnv))


def reset(env, seed):
    if is_sb3(env):
        env.seed(seed)  # SB3's VecEnv
        return env.reset()
    return env.reset(seed=seed)


def run(env, steps):
    """Step with actions from the env's own action space (its generator is state too) and
    return everything the steps gave back."""
    out = []
    for _ in range(steps):
        if is_sb3(env):  # one action space for all environments
            action = np.stack([env.action_space.sample() for _ in range(env.num_envs)])
        else:
            action = env.action_space.sample()
        result = env.step(action)
        out.append(tuple(np.asarray(x) for x in result[:-1]))
    return out


def assert_same_steps(got, expected):
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y, err_msg=f"step {i}")


def statistics(env):
    """Every running mean/var/count and episode queue anywhere in the env, by path."""
    found = {}
    for name, layer in zipsave._api._env_state._layers(env):
        for key in ("obs_rms", "return_rms", "ret_rms"):
            rms = getattr(layer, key, None) if key in vars(layer) else None
            if rms is not None:
                found[f"{name}.{key}"] = (np.copy(rms.mean), np.copy(rms.var), float(rms.count))
        for key in ("return_queue", "length_queue"):
            if key in vars(layer):
                found[f"{name}.{key}"] = list(getattr(layer, key))
    return found


def assert_same_statistics(a, b):
    assert a.keys() == b.keys() and a
    for key in a:
        if isinstance(a[key], tuple):
            for x, y in zip(a[key], b[key]):
                np.testing.assert_array_equal(x, y, err_msg=key)
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_a_resumed_run_steps_bit_identically(tmp_path, kind):
    make = maker(kind)
    env = make()
    reset(env, 0)
    env.action_space.seed(1)
    run(env, 120)  # past the end of some episodes: episode statistics and autoreset state
    agent = torch.nn.Linear(3, 2)
    app_state = {"agent": agent, "envs": zipsave.EnvState(env), "rng": zipsave.RNGState(), "step": 120}
    zipsave.save(app_state, tmp_path / "run.zip")
    saved_statistics = statistics(env)
    expected = run(env, 60)

    resumed = make()
    reset(resumed, 99)  # another seed: everything that matters comes from the checkpoint
    resumed.action_space.seed(99)
    run(resumed, 7)
    resumed_state = {
        "agent": torch.nn.Linear(3, 2),
        "envs": zipsave.EnvState(resumed),
        "rng": zipsave.RNGState(),
        "step": 0,
    }
    zipsave.restore(resumed_state, tmp_path / "run.zip", strict=True)
    assert resumed_state["step"] == 120
    assert_same_statistics(statistics(resumed), saved_statistics)
    assert_same_steps(run(resumed, 60), expected)
    assert_same_statistics(statistics(resumed), statistics(env))


def saved_cartpole_run(path, *, seed, steps):
    """Two CartPoles stepped ``steps`` times from ``seed``, their state saved at ``path``."""
    envs = cartpole_envs()
    envs.reset(seed=seed)
    envs.action_space.seed(seed)
    run(envs, steps)
    zipsave.save({"envs": zipsave.EnvState(envs)}, path)
    return envs


def test_the_normalization_statistics_reach_a_new_environment(tmp_path):
    envs = saved_cartpole_run(tmp_path / "run.zip", seed=0, steps=40)

    fresh = cartpole_envs()
    before = statistics(fresh)
    zipsave.restore({"envs": zipsave.EnvState(fresh)}, tmp_path / "run.zip", strict=True)
    after = statistics(fresh)
    for i in range(2):
        key = f"env{i}.1.obs_rms"  # NormalizeReward(NormalizeObservation(...)): layer 1
        assert before[key][2] < 1 and after[key][2] == envs.envs[i].env.obs_rms.count > 40  # reset and 40 steps
        np.testing.assert_array_equal(after[key][0], envs.envs[i].env.obs_rms.mean)
        np.testing.assert_array_equal(after[key][1], envs.envs[i].env.obs_rms.var)


def test_the_archive_holds_no_pickled_object_and_load_gives_plain_values(tmp_path):
    envs = cartpole_envs()
    envs.reset(seed=0)
    run(envs, 30)
    zipsave.save({"envs": zipsave.EnvState(envs), "rng": zipsave.RNGState()}, tmp_path / "run.zip")

    info = zipsave.inspect(tmp_path / "run.zip")
    assert info.pickled == ()
    assert any(t.name.startswith("envs") and "obs_rms" in t.name for t in info.tensors), "not inspectable"
    with zipfile.ZipFile(tmp_path / "run.zip") as zf:
        pth = zipfile.ZipFile(io.BytesIO(zf.read("envs.pth")))
    with pth.open(next(n for n in pth.namelist() if n.endswith("data.pkl"))) as f:
        f._expected_crc = None  # zipsave writes torch's inner records with CRC 0, as torch.load accepts
        pickle_bytes = f.read()
    imported = {arg for op, arg, _ in pickletools.genops(pickle_bytes) if op.name == "GLOBAL"}
    assert imported and all(
        name.startswith(("torch ", "torch._utils ", "collections OrderedDict")) for name in imported
    )

    loaded = zipsave.load(tmp_path / "run.zip")["envs"]
    plain = (dict, list, tuple, str, int, float, bool, type(None), torch.Tensor)

    def walk(value, path):
        assert isinstance(value, plain), f"{path} is a {type(value).__name__}"
        items = (
            value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
        )
        for key, item in items:
            walk(item, f"{path}.{key}")

    walk(loaded, "envs")
    mean = loaded["env0.1"]["objects"]["obs_rms"]["mean"]
    assert mean[":type:"] == "numpy.ndarray" and mean["dtype"] == envs.envs[0].env.obs_rms.mean.dtype.str
    assert torch.equal(mean["data"], torch.from_numpy(envs.envs[0].env.obs_rms.mean))


FRESH = """
import sys, numpy as np, gymnasium as gym, zipsave
sys.path.insert(0, "tests")
from test_env_state import cartpole_envs, run
envs = cartpole_envs()
zipsave.restore({"envs": zipsave.EnvState(envs)}, sys.argv[1], strict=True)
np.save(sys.argv[2], np.stack([step[0] for step in run(envs, 25)]))
"""


def test_a_fresh_process_resumes_the_same_steps(tmp_path):
    envs = saved_cartpole_run(tmp_path / "run.zip", seed=3, steps=50)
    expected = np.stack([step[0] for step in run(envs, 25)])

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", FRESH, str(tmp_path / "run.zip"), str(tmp_path / "obs.npy")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "obs.npy"), expected)


def test_an_async_vector_env_is_refused_with_the_fix():
    envs = gym.vector.AsyncVectorEnv([lambda: gym.make("CartPole-v1")])
    wrapped = gym.wrappers.vector.NormalizeObservation(envs) if GYM_1 else envs  # found below its wrappers
    try:
        for env in (envs, wrapped):
            with pytest.raises(
                zipsave.EncodeError, match=re.escape("EnvState cannot capture `AsyncVectorEnv`")
            ) as caught:
                zipsave.EnvState(env)
            assert "gymnasium.vector.SyncVectorEnv" in caught.value.hint
    finally:
        envs.close()


def test_restoring_into_another_number_of_environments_names_the_counts(tmp_path):
    envs = cartpole_envs(2)
    envs.reset(seed=0)
    run(envs, 5)
    zipsave.save({"envs": zipsave.EnvState(envs)}, tmp_path / "run.zip")
    other = cartpole_envs(3)
    other.reset(seed=1)
    before = statistics(other)
    with pytest.raises(
        zipsave.ParameterMismatchError,
        match=re.escape("does not fit these environments: it has 2 environments, this one has 3 environments."),
    ) as caught:
        zipsave.restore({"envs": zipsave.EnvState(other)}, tmp_path / "run.zip")
    assert caught.value.member == "envs.pth" and caught.value.archive.endswith("run.zip")
    assert_same_statistics(statistics(other), before)  # nothing was changed


def test_restoring_into_another_kind_of_environment_names_the_layer(tmp_path):
    env = pendulum_env()
    env.reset(seed=0)
    zipsave.save({"env": zipsave.EnvState(env)}, tmp_path / "run.zip")
    other = gym.wrappers.NormalizeObservation(gym.make("CartPole-v1"))
    # (Patched)TimeLimit: rl_zoo3, once imported by another test, replaces gymnasium's TimeLimit
    with pytest.raises(
        zipsave.ParameterMismatchError,
        match="`env` was NormalizeObservation > RecordEpisodeStatistics > (Patched)?TimeLimit > ",
    ) as caught:
        zipsave.restore({"env": zipsave.EnvState(other)}, tmp_path / "run.zip")
    assert re.search(
        r"PendulumEnv, is NormalizeObservation > (Patched)?TimeLimit > .* > CartPoleEnv\.", str(caught.value)
    )
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape("it has a single environment, this one has 2")):
        zipsave.restore({"env": zipsave.EnvState(cartpole_envs())}, tmp_path / "run.zip")


def test_a_vec_env_state_dict_of_numpy_values_loads_into_env_state():
    pytest.importorskip("stable_baselines3")
    import zipsave.sb3

    envs = cartpole_envs()
    envs.reset(seed=0)
    run(envs, 20)
    state = zipsave.sb3.VecEnvState(envs).state_dict()
    assert isinstance(state["env0.1"]["objects"]["obs_rms"]["mean"], np.ndarray)
    other = cartpole_envs()
    zipsave.EnvState(other).load_state_dict(state)
    assert_same_statistics(statistics(other), statistics(envs))


def test_a_vec_env_state_in_an_app_state_is_refused_with_env_state_and_the_old_archive_kept(tmp_path):
    # it was refused with the hint for one's own stateful objects ("Return tensors ... from
    # `state_dict`"), which a VecEnvState's user cannot change
    pytest.importorskip("stable_baselines3")
    import zipsave.sb3

    envs = cartpole_envs()
    envs.reset(seed=0)
    run(envs, 20)
    path = tmp_path / "run.zip"
    zipsave.save({"step": 1}, path)
    before = path.read_bytes()
    with pytest.raises(
        zipsave.EncodeError,
        match=re.escape(
            "key `envs`: holds a VecEnvState, whose `state_dict` keeps numpy arrays for a `data` value (as "
            "`CheckpointCallback(env_state=True)` stores it), which an app-state value's `.pth` member cannot "
            "hold; nothing was written. Put `zipsave.EnvState(env)` there, which captures the same state as "
            "tensors: `{'envs': zipsave.EnvState(env)}`"
        ),
    ) as caught:
        zipsave.save({"envs": zipsave.sb3.VecEnvState(envs), "step": 2}, path)
    assert caught.value.key == "envs"
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["run.zip"]
    zipsave.save({"envs": zipsave.EnvState(envs), "step": 2}, path)  # what the error says to do
    other = cartpole_envs()
    zipsave.restore({"envs": zipsave.sb3.VecEnvState(other), "step": 0}, path, strict=True)
    assert_same_statistics(statistics(other), statistics(envs))


class OddValues(gym.Env):
    """An environment whose state holds the values torch has no tensor for, or that a tensor
    would change: they come back with their type, dtype, byte order and shape."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.values = {}


ODD_VALUES = {
    "uint32": np.arange(6, dtype=np.uint32).reshape(2, 3),
    "uint64": np.array([2**64 - 1], dtype=np.uint64),
    "big_endian": np.array([1.5, -2.25], dtype=">f8"),
    "strings": np.array(["a", "bc"]),
    "datetimes": np.array(["2024-01-02"], dtype="datetime64[D]"),
    "empty": np.zeros((0, 3), dtype=np.float32),
    "zero_d": np.array(7, dtype=np.int16),
    "float32_scalar": np.float32(0.1),
    "int64_scalar": np.int64(-3),
    "bool_scalar": np.bool_(True),
    "non_contiguous": np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2],
    "deque": collections.deque([1.0, 2.0], maxlen=3),
    "tuple": (np.float64(1.0), "x", 3),
}


@pytest.mark.parametrize("name", sorted(ODD_VALUES))
def test_values_come_back_with_their_type_and_dtype(tmp_path, name):
    env = OddValues()
    setattr(env, name, ODD_VALUES[name])
    zipsave.save({"env": zipsave.EnvState(env)}, tmp_path / "env.zip")
    other = OddValues()
    zipsave.restore({"env": zipsave.EnvState(other)}, tmp_path / "env.zip", strict=True)
    saved, back = ODD_VALUES[name], getattr(other, name)
    assert type(back) is type(saved)
    if isinstance(saved, (np.ndarray, np.generic)):
        assert back.dtype == saved.dtype and back.shape == saved.shape
        np.testing.assert_array_equal(back, saved)
    else:
        assert back == saved and getattr(back, "maxlen", None) == getattr(saved, "maxlen", None)
        if isinstance(saved, tuple):
            assert type(back[0]) is np.float64


def test_the_generators_of_composite_spaces_come_back_even_into_spaces_never_sampled(tmp_path):
    env = OddValues()
    env.action_space = gym.spaces.Dict(
        {"move": gym.spaces.Discrete(4), "aim": gym.spaces.Tuple([gym.spaces.Box(-1, 1)])}
    )
    env.action_space.seed(5)
    env.action_space.sample()
    zipsave.save({"env": zipsave.EnvState(env)}, tmp_path / "env.zip")
    expected = [env.action_space.sample() for _ in range(3)]

    other = OddValues()
    other.action_space = gym.spaces.Dict(
        {"move": gym.spaces.Discrete(4), "aim": gym.spaces.Tuple([gym.spaces.Box(-1, 1)])}
    )
    zipsave.restore({"env": zipsave.EnvState(other)}, tmp_path / "env.zip", strict=True)
    got = [other.action_space.sample() for _ in range(3)]
    assert [a["move"] for a in got] == [a["move"] for a in expected]
    np.testing.assert_array_equal([a["aim"][0] for a in got], [a["aim"][0] for a in expected])


def test_a_wrapper_subclass_such_as_rl_zoo3s_patched_time_limit_restores_into_the_plain_one(tmp_path):
    """rl_zoo3 replaces gymnasium's TimeLimit by a subclass on import: the process that saved
    may have had it and the one restoring not, or the other way round."""

    class PatchedTimeLimit(gym.wrappers.TimeLimit):
        pass

    def make(limit_class):
        return gym.wrappers.NormalizeObservation(limit_class(gym.make("CartPole-v1").unwrapped, max_episode_steps=50))

    for saved_class, live_class in [
        (PatchedTimeLimit, gym.wrappers.TimeLimit),
        (gym.wrappers.TimeLimit, PatchedTimeLimit),
    ]:
        env = make(saved_class)
        env.reset(seed=0)
        for _ in range(7):
            env.step(env.action_space.sample())
        zipsave.save({"env": zipsave.EnvState(env)}, tmp_path / "run.zip")
        live = make(live_class)
        zipsave.restore({"env": zipsave.EnvState(live)}, tmp_path / "run.zip")
        assert live.obs_rms.count == env.obs_rms.count
        assert np.array_equal(live.obs_rms.mean, env.obs_rms.mean)
        with pytest.raises(zipsave.ParameterMismatchError, match="CartPoleEnv"):  # an unrelated wrapper still differs
            zipsave.restore(
                {
                    "env": zipsave.EnvState(
                        gym.wrappers.NormalizeObservation(
                            gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1").unwrapped)
                        )
                    )
                },
                tmp_path / "run.zip",
            )
