"""The RL Zoo through ``python -m zipsave.sb3``: the real ``rl_zoo3.train`` and
``rl_zoo3.enjoy`` save and load through zipsave, and the Zoo's archives load with zipsave's
defaults keeping their schedules (``lin_0.001`` learning rate, ``lin_0.2`` clip range)."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import re
import subprocess
import sys
import warnings
import zipfile

import numpy as np
import pytest

import zipsave

pytest.importorskip("rl_zoo3")  # the `test` extra installs it

from stable_baselines3 import PPO  # noqa: E402

ROOT = pathlib.Path(zipsave.__file__).parents[1]


def run_zoo(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "zipsave.sb3", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory):
    """Train PPO on CartPole for one rollout (256 steps) with the Zoo's own hyperparameters."""
    folder = tmp_path_factory.mktemp("zoo")
    out = run_zoo(
        folder,
        "rl_zoo3.train",
        "--algo",
        "ppo",
        "--env",
        "CartPole-v1",
        "-n",
        "256",
        "-f",
        "logs",
        "--seed",
        "3",
        "--eval-freq",
        "-1",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return folder, folder / "logs" / "ppo" / "CartPole-v1_1" / "CartPole-v1.zip"


def test_zoo_train_saves_through_zipsave(zoo_run):
    _, archive = zoo_run
    names = zipfile.ZipFile(archive).namelist()
    assert "manifest.json" in names and "_zipsave_version" in names


def test_zoo_archive_loads_with_the_defaults_keeping_its_schedules(zoo_run):
    _, archive = zoo_run
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped
        model = zipsave.load(archive, cls=PPO, device="cpu")
    reference = PPO.load(archive, device="cpu")  # SB3's own loader (plain cloudpickle)
    assert_zoo_schedule(model.learning_rate, 0.001)
    for progress in (1.0, 0.5, 0.1):
        assert model.lr_schedule(progress) == reference.lr_schedule(progress)
        assert model.clip_range(progress) == reference.clip_range(progress)
    assert model.lr_schedule(0.5) == pytest.approx(0.0005)  # the Zoo's lin_0.001
    assert model.clip_range(0.5) == pytest.approx(0.1)  # lin_0.2


def test_zoo_enjoy_loads_through_zipsave(zoo_run):
    folder, _ = zoo_run
    out = run_zoo(
        folder,
        "rl_zoo3.enjoy",
        "--algo",
        "ppo",
        "--env",
        "CartPole-v1",
        "-f",
        "logs",
        "--exp-id",
        "1",
        "-n",
        "50",
        "--no-render",
        "--deterministic",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Loading logs/ppo/CartPole-v1_1/CartPole-v1.zip" in out.stdout
    assert "Warning" not in out.stderr, out.stderr[-3000:]


# -- archives of rl-zoo3 < 2.7: schedules were closures --------------------------------------
# The Zoo's `linear_schedule` as rl-zoo3 1.x-2.6 (first) and the utils/utils.py Zoo before
# it (second) defined it; the Zoo stored the closure it returns as `learning_rate` and
# `clip_range`. Compiled here under the Zoo's module name, it pickles exactly as the Zoo's did
# (only the file name and line numbers differ).
ZOO_2_6 = '''
def linear_schedule(initial_value):
    # Force conversion to float
    initial_value_ = float(initial_value)

    def func(progress_remaining: float) -> float:
        """
        Progress will decrease from 1 (beginning) to 0
        :param progress_remaining: (float)
        :return: (float)
        """
        return progress_remaining * initial_value_

    return func
'''
ZOO_1_0 = '''
def linear_schedule(initial_value):
    if isinstance(initial_value, str):
        initial_value = float(initial_value)

    def func(progress_remaining: float) -> float:
        """
        Progress will decrease from 1 (beginning) to 0
        :param progress_remaining: (float)
        :return: (float)
        """
        return progress_remaining * initial_value

    return func
'''


def assert_zoo_schedule(schedule, initial_value: float) -> None:
    """The installed Zoo's own linear schedule of ``initial_value``: ``SimpleLinearSchedule`` from
    rl-zoo3 2.7, the installed ``linear_schedule`` closure before (tested on the lowest stack)."""
    import rl_zoo3.utils

    if hasattr(rl_zoo3.utils, "SimpleLinearSchedule"):
        assert isinstance(schedule, rl_zoo3.utils.SimpleLinearSchedule)
        assert schedule.initial_value == initial_value
    else:
        installed = rl_zoo3.utils.linear_schedule(initial_value)
        assert schedule.__code__ is installed.__code__  # built by the installed Zoo, not the archive
        assert [c.cell_contents for c in schedule.__closure__] == [initial_value]


def zoo_closure(source: str, value, module: str = "rl_zoo3.utils"):
    namespace = {"__name__": module}
    # dont_inherit: this test module's `from __future__ import annotations` is not the Zoo's
    exec(
        compile("\n" * 300 + source, f"/site-packages/{module.replace('.', '/')}.py", "exec", dont_inherit=True),
        namespace,
    )
    return namespace["linear_schedule"](value)


def old_zoo_archive(path, source, module="rl_zoo3.utils"):
    model = PPO(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=32,
        batch_size=32,
        device="cpu",
        learning_rate=zoo_closure(source, "0.001", module),
        clip_range=zoo_closure(source, 0.2, module),
    )
    model.save(path)  # SB3's own save, as the old Zoo did
    return path


@pytest.mark.parametrize(("source", "module"), [(ZOO_2_6, "rl_zoo3.utils"), (ZOO_1_0, "utils.utils")])
def test_old_zoo_schedule_closures_are_rebuilt_without_running_them(tmp_path, source, module):
    import zipsave.sb3

    path = old_zoo_archive(tmp_path / "old_zoo.zip", source, module)
    reference = PPO.load(path, device="cpu")  # SB3: cloudpickle runs the pickled code
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped
        loaded = zipsave.load(path, cls=PPO, device="cpu")
        with zipsave.sb3.installed():
            adopted = PPO.load(path, device="cpu")
    for model in (loaded, adopted):
        assert_zoo_schedule(model.learning_rate, 0.001)
        for progress in (1.0, 0.5, 0.1):
            assert model.lr_schedule(progress) == reference.lr_schedule(progress)
            assert model.clip_range(progress) == reference.clip_range(progress)


def test_a_closure_with_other_code_is_not_rebuilt(tmp_path):
    # Another constant than the Zoo's: the code's shape differs on every Python (its bytecode is
    # never compared, it differs between Python versions anyway).
    other = ZOO_2_6.replace("progress_remaining * initial_value_", "progress_remaining * initial_value_ / 2")
    path = old_zoo_archive(tmp_path / "other.zip", other)
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("could not be decoded")):
        model = zipsave.load(path, cls=PPO, device="cpu", report=report)
    assert {"learning_rate", "lr_schedule", "clip_range"} <= {entry.key for entry in report.skipped}
    assert model.lr_schedule(0.5) == 3e-4  # PPO's default, as the warning says; never the wrong schedule


# -- the RL Zoo's published agents (rl-trained-agents), loaded safely ------------------------
ZOO_AGENTS = ROOT / "tests" / "data" / "rl_zoo"
EXPECTED = json.loads((ZOO_AGENTS / "expected.json").read_text())


def zoo_class(name: str) -> type:
    from sb3_contrib import ARS
    from stable_baselines3 import SAC

    return {"ARS": ARS, "PPO": PPO, "SAC": SAC}[name]


def zipsave_sb3():
    import zipsave.sb3 as module

    return module


def load_zoo_agent(name: str, door: str):
    path, cls = ZOO_AGENTS / name, zoo_class(EXPECTED[name]["class"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if door == "install":
            with zipsave_sb3().installed():
                model = cls.load(path, device="cpu")
        else:
            model = zipsave.load(path, cls=cls, device="cpu")
    assert [str(w.message) for w in caught] == []  # nothing skipped, nothing to say
    return model


@pytest.mark.parametrize("door", ["load", "install"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_published_zoo_agents_load_safely_and_act_as_with_sb3(name, door):
    # SAC Pendulum-v1 (2020): numpy 1.x pickled dtypes as dtype('f4', 0, 1), its closures are
    # cloudpickle's _make_skel_func/_fill_function, its .pth members torch's legacy stream. ARS
    # and PPO (Python 3.7): closures as cloudpickle 1.x's _builtin_type('LambdaType').
    model = load_zoo_agent(name, door)
    expected = EXPECTED[name]
    observations = np.asarray(expected["observations"], dtype=model.observation_space.dtype)
    actions, _ = model.predict(observations, deterministic=True)
    np.testing.assert_allclose(np.asarray(actions, dtype=np.float64), expected["actions"], rtol=1e-6, atol=1e-7)
    for attr, schedule in expected["schedules"].items():
        # SB3 itself cannot rebuild these Python 3.7 closures (it falls back to the defaults); the
        # values are what the pickled closures compute, recognised without running them
        assert [getattr(model, attr)(p) for p in (1.0, 0.5, 0.1)] == pytest.approx(schedule["values"]), attr


def test_a_lost_zoo_schedule_names_the_custom_objects_fix(tmp_path):
    from sb3_contrib import ARS

    # the ARS agent's `delta_std_schedule` under another name: not SB3's closure, code never run
    path = tmp_path / "ars.zip"
    with zipfile.ZipFile(ZOO_AGENTS / "ars_Pendulum-v1.zip") as src, zipfile.ZipFile(path, "w") as out:
        for item in src.infolist():
            payload = src.read(item)
            if item.filename == "data":
                data = json.loads(payload)
                pickled = base64.b64decode(data["delta_std_schedule"][":serialized:"])
                renamed = pickled.replace(b"constant_fn.<locals>", b"constant_fx.<locals>")
                data["delta_std_schedule"][":serialized:"] = base64.b64encode(renamed).decode()
                payload = json.dumps(data).encode()
            out.writestr(item, payload)
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("`delta_std_schedule` could not be decoded")) as caught:
        model = zipsave.load(path, cls=ARS, device="cpu")
    assert any("custom_objects={'delta_std_schedule': ...}" in str(w.message) for w in caught)
    assert model.delta_std_schedule(0.5) == 0.05  # ARS's default, as the warning says


def test_a_damaged_legacy_torch_stream_is_refused_by_name(tmp_path):
    from stable_baselines3 import SAC

    # the SAC agent's policy.pth (torch's pre-zip stream) claiming more elements than follow
    path = tmp_path / "sac.zip"
    with zipfile.ZipFile(ZOO_AGENTS / "sac_Pendulum-v1.zip") as src, zipfile.ZipFile(path, "w") as out:
        for item in src.infolist():
            payload = src.read(item)
            out.writestr(item, payload[: len(payload) - 4096] if item.filename == "policy.pth" else payload)
    with pytest.raises(zipsave.IntegrityError, match=re.escape("member `policy.pth`")) as raised:
        zipsave.load(path, cls=SAC, device="cpu")
    assert "a legacy torch storage" in str(raised.value)


# -- SB3 1.x's HER agents: `online_sampling`, which SB3 2.0 removed ---------------------------
HER_AGENT = ZOO_AGENTS / "tqc_PandaReach-v1.zip"  # rl-trained-agents cd35bde, sb3-contrib 1.2


def her_env(path=HER_AGENT):
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv

    data = zipsave.load_archive(path)[0]

    class GoalEnv(gym.Env):  # the saved spaces and a reward, all HerReplayBuffer asks of an env
        observation_space, action_space = data["observation_space"], data["action_space"]

        def reset(self, seed=None, options=None):
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0.0, False, False, {}

        def compute_reward(self, achieved_goal, desired_goal, info):
            return -np.ones(len(achieved_goal), dtype=np.float32)

    return DummyVecEnv([GoalEnv])


def saved_weights(path, member):
    import io

    import torch

    with zipfile.ZipFile(path) as archive:
        return torch.load(io.BytesIO(archive.read(member)), weights_only=True)


@pytest.mark.parametrize("door", ["load", "install"])
def test_an_sb3_1_her_agent_loads_without_its_removed_buffer_arguments(door):
    from sb3_contrib import TQC
    from stable_baselines3 import HerReplayBuffer

    # SB3 2.x's own TQC.load stops at "HerReplayBuffer.__init__() got an unexpected keyword
    # argument 'online_sampling'" for this published agent
    report = zipsave.LoadReport()
    if door == "install":
        with zipsave_sb3().installed():
            model = TQC.load(HER_AGENT, env=her_env(), device="cpu")
    else:
        model = zipsave.load(HER_AGENT, cls=TQC, env=her_env(), device="cpu", report=report)
        assert any("`online_sampling=True`" in note and "SB3 2.0 removed" in note for note in report.notes)
    assert type(model.replay_buffer) is HerReplayBuffer
    assert model.replay_buffer.n_sampled_goal == 4 and model.replay_buffer.goal_selection_strategy.name == "FUTURE"
    assert "online_sampling" not in model.replay_buffer_kwargs
    saved, loaded = saved_weights(HER_AGENT, "policy.pth"), model.policy.state_dict()
    assert saved.keys() == loaded.keys()
    assert all(torch_equal(saved[name], loaded[name]) for name in saved)
    assert model.learning_rate(1.0) == pytest.approx(1e-3)  # the Zoo's schedule, which SB3 2.x drops


def torch_equal(a, b):
    import torch

    return torch.equal(a, b)


def test_an_sb3_1_her_agent_without_an_env_names_the_fix():
    from sb3_contrib import TQC

    with pytest.raises(zipsave.DecodeError, match=re.escape("key `replay_buffer_class`")) as raised:
        zipsave.load(HER_AGENT, cls=TQC, device="cpu")
    assert "zipsave.load(path, cls=TQC, env=env)" in str(raised.value)
    assert "HerReplayBuffer" in str(raised.value)


def test_offline_her_sampling_warns_that_sb3_2_samples_online(tmp_path):
    from sb3_contrib import TQC

    path = tmp_path / "offline.zip"
    with zipfile.ZipFile(HER_AGENT) as src, zipfile.ZipFile(path, "w") as out:
        for item in src.infolist():
            payload = src.read(item)
            if item.filename == "data":
                data = json.loads(payload)
                data["replay_buffer_kwargs"].update(online_sampling=False, max_episode_length=50)
                payload = json.dumps(data).encode()
            out.writestr(item, payload)
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("`online_sampling=False`")):
        model = zipsave.load(path, cls=TQC, env=her_env(), device="cpu", report=report)
    assert not {"online_sampling", "max_episode_length"} & set(model.replay_buffer_kwargs)
    assert any("`max_episode_length=50`" in note for note in report.notes)


def test_a_huge_removed_her_argument_is_named_by_its_size(tmp_path):
    import pickle

    from sb3_contrib import TQC

    # a pickled `replay_buffer_kwargs` whose removed argument is a 5 000-digit integer: the note
    # that names it raised Python's limit on integer text, which failed the whole load
    path = tmp_path / "huge.zip"
    kwargs = {"online_sampling": True, "max_episode_length": 10**5000, "n_sampled_goal": 4}
    with zipfile.ZipFile(HER_AGENT) as src, zipfile.ZipFile(path, "w") as out:
        for item in src.infolist():
            payload = src.read(item)
            if item.filename == "data":
                data = json.loads(payload)
                serialized = base64.b64encode(pickle.dumps(kwargs)).decode()
                data["replay_buffer_kwargs"] = {":type:": "<class 'dict'>", ":serialized:": serialized}
                payload = json.dumps(data).encode()
            out.writestr(item, payload)
    report = zipsave.LoadReport()
    model = zipsave.load(path, cls=TQC, env=her_env(), device="cpu", report=report)
    assert "max_episode_length" not in model.replay_buffer_kwargs
    assert any("`max_episode_length=an integer of 16610 bits`" in note for note in report.notes)
