"""Every door that loads an SB3 object gives what SB3's own load gives, value for value and type
for type: ``zipsave.load(cls=...)``, and SB3's ``Algo.load``, ``VecNormalize.load`` and
``load_replay_buffer`` under ``zipsave.sb3.install()``, compared with SB3 itself (no stand-in)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import zipsave

pytest.importorskip("stable_baselines3")  # the `test` extra installs it

from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize  # noqa: E402

import zipsave.sb3  # noqa: E402


def cartpole():
    return DummyVecEnv([lambda: gym.make("CartPole-v1")])


def statistics(vec_normalize):
    """Each running statistic of a VecNormalize with its type: (label, type, value)."""
    out = []
    for name in ("obs_rms", "ret_rms"):
        rms = getattr(vec_normalize, name)
        for field in ("mean", "var", "count"):
            value = getattr(rms, field)
            out.append((f"{name}.{field}", type(value), np.asarray(value).tolist()))
    return out


@pytest.mark.parametrize("steps", [0, 16], ids=["fresh", "updated"])
def test_vec_normalize_statistics_have_the_types_sb3_gives_through_every_door(tmp_path, steps):
    # an updated RunningMeanStd of shape () holds np.float64 (update_from_moments), a fresh one
    # 0-d arrays: SB3's pickle gives back either as it was, and so must every zipsave door
    model = PPO(
        "MlpPolicy", VecNormalize(cartpole()), n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu",
        policy_kwargs={"net_arch": [8]},
    )  # fmt: skip
    if steps:
        model.learn(steps)
    model.get_vec_normalize_env().save(tmp_path / "sb3.pkl")
    expected = statistics(VecNormalize.load(tmp_path / "sb3.pkl", cartpole()))  # SB3's own load
    if steps:
        assert ("ret_rms.mean", np.float64, expected[3][2]) == expected[3]
    path = tmp_path / "model.zip"
    zipsave.save(model, path, include=["vec_normalize"])
    loaded = {
        "zipsave.load(env=venv)": zipsave.load(path, cls=PPO, env=cartpole()).get_vec_normalize_env(),
        "zipsave.load(env=VecNormalize)": zipsave.load(
            path, cls=PPO, env=VecNormalize(cartpole())
        ).get_vec_normalize_env(),
    }
    with zipsave.sb3.installed():
        loaded["VecNormalize.load(archive)"] = VecNormalize.load(path, cartpole())
        loaded["PPO.load(archive, env=venv)"] = PPO.load(path, env=cartpole()).get_vec_normalize_env()
        loaded["VecNormalize.load(SB3's pickle)"] = VecNormalize.load(tmp_path / "sb3.pkl", cartpole())
    for door, vec_normalize in loaded.items():
        assert statistics(vec_normalize) == expected, door
    # the last raw observation and reward SB3's pickle keeps (get_original_obs/_reward), in
    # every wrapper a load builds (a VecNormalize the caller passed keeps its own)
    sb3s = VecNormalize.load(tmp_path / "sb3.pkl", cartpole())
    for door, vec_normalize in loaded.items():
        if door != "zipsave.load(env=VecNormalize)":
            for name in ("old_obs", "old_reward"):
                mine, theirs = getattr(vec_normalize, name, None), getattr(sb3s, name, None)
                assert type(mine) is type(theirs) and np.asarray(mine).dtype == np.asarray(theirs).dtype, (door, name)
                assert np.array_equal(mine, theirs), (door, name)


@pytest.mark.parametrize("keys", [None, ["vec"]], ids=["all-keys", "vec-only"])
def test_saved_vec_normalize_wraps_the_env_as_sb3_stacks_it(tmp_path, keys):
    # SB3 stacks `PPO.load(path, env=VecNormalize.load(pkl, venv))` as it trained:
    # VecNormalize around the env, and VecTransposeImage outside it only where an image key is
    # left unnormalized. zipsave's load put VecTransposeImage first and VecNormalize around it:
    # the saved statistics of channel-last images did not fit (the statistics were skipped and
    # the load failed on the spaces), or VecNormalize saw transposed images.
    from stable_baselines3.common.envs import SimpleMultiObsEnv

    def venv():
        return DummyVecEnv([lambda: SimpleMultiObsEnv(random_start=False)])

    model = PPO(
        "MultiInputPolicy", VecNormalize(venv(), norm_obs_keys=keys), n_steps=8, batch_size=8, n_epochs=1, seed=0,
        device="cpu", policy_kwargs={"net_arch": [8]},
    )  # fmt: skip
    model.learn(8)
    model.save(tmp_path / "sb3.zip")
    model.get_vec_normalize_env().save(tmp_path / "sb3.pkl")
    expected = PPO.load(tmp_path / "sb3.zip", env=VecNormalize.load(tmp_path / "sb3.pkl", venv()), device="cpu")
    path = tmp_path / "model.zip"
    zipsave.save(model, path, include=["vec_normalize"])
    loaded = {"zipsave.load": zipsave.load(path, cls=PPO, env=venv(), device="cpu")}
    with zipsave.sb3.installed():
        loaded["PPO.load"] = PPO.load(path, env=venv(), device="cpu")

    def stack(env):
        out = []
        while env is not None:
            out.append(type(env).__name__)
            env = getattr(env, "venv", None)
        return out

    assert stack(expected.env) == ["VecTransposeImage"] * bool(keys) + ["VecNormalize", "DummyVecEnv"]
    space = expected.observation_space
    space.seed(0)
    obs = space.sample()
    for door, got in loaded.items():
        assert stack(got.env) == stack(expected.env), door
        vec_normalize = got.get_vec_normalize_env()
        for key, rms in expected.get_vec_normalize_env().obs_rms.items():
            assert np.array_equal(vec_normalize.obs_rms[key].mean, rms.mean), (door, key)
        assert np.array_equal(got.predict(obs, deterministic=True)[0], expected.predict(obs, deterministic=True)[0])


@pytest.mark.parametrize(
    "last_step",
    [{"old_obs": 5}, {"old_reward": [1.0]}, {"old_obs": None, "env": 1}],
    ids=["not-an-array", "a-list", "unknown-name"],
)
def test_a_saved_last_step_is_checked_before_it_is_set(tmp_path, last_step):
    import json
    import zipfile

    model = PPO("MlpPolicy", VecNormalize(cartpole()), n_steps=8, batch_size=8, n_epochs=1, device="cpu")
    model.learn(8)
    path, edited = tmp_path / "model.zip", tmp_path / "edited.zip"
    zipsave.save(model, path, include=["vec_normalize"])
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(edited, "w") as dst:
        for item in src.infolist():
            raw = src.read(item)
            if item.filename == "vec_normalize/data":
                state = json.loads(raw)
                assert "last_step" in state
                raw = json.dumps({**state, "last_step": last_step}).encode()
            dst.writestr(item, raw)
    with pytest.warns(zipsave.ZipsaveWarning) as caught:
        loaded = zipsave.load(edited, cls=PPO, env=cartpole(), device="cpu")
    assert any("skipped member `vec_normalize/data`: `last_step" in str(w.message) for w in caught)
    assert loaded.get_vec_normalize_env() is None  # skipped whole, as any broken extra


def test_a_load_that_does_not_fit_raises_what_sb3_raises(tmp_path):
    # SB3's set_parameters raises torch's RuntimeError for weights of other shapes (and SB3's own
    # load catches RuntimeError to retry old archives); zipsave's ParameterMismatchError was only
    # a ValueError, so `except RuntimeError` written for SB3 let it through
    model = PPO("MlpPolicy", cartpole(), n_steps=8, batch_size=8, device="cpu", policy_kwargs={"net_arch": [8]})
    path = tmp_path / "ppo.zip"
    model.save(path)

    def calls():
        wider = PPO("MlpPolicy", cartpole(), n_steps=8, batch_size=8, device="cpu", policy_kwargs={"net_arch": [16]})
        yield "set_parameters", lambda: wider.set_parameters(path, device="cpu")
        yield "env", lambda: PPO.load(path, env=gym.make("Pendulum-v1"), device="cpu")
        yield "policy_kwargs", lambda: PPO.load(path, device="cpu", policy_kwargs={"net_arch": [16]})

    raised = {}
    for name, call in calls():
        with pytest.raises(Exception) as sb3s:
            call()
        raised[name] = type(sb3s.value)
    assert raised == {"set_parameters": RuntimeError, "env": ValueError, "policy_kwargs": ValueError}
    with zipsave.sb3.installed():
        for name, call in calls():
            with pytest.raises(raised[name]) as ours:
                call()
            assert isinstance(ours.value, zipsave.ParameterMismatchError), name
    wider = PPO("MlpPolicy", cartpole(), n_steps=8, batch_size=8, device="cpu", policy_kwargs={"net_arch": [16]})
    with pytest.raises(RuntimeError):
        zipsave.restore(wider, path)
