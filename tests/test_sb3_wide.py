"""Stable-Baselines3 support as a new user meets it, on models and archives the other SB3 tests do
not cover: schedules made by SB3's helper functions, SB3's own ``load`` under ``install()``,
classes stored by value, ``zipsave diff`` of undecodable values, and every algorithm of SB3 and
sb3-contrib with non-default policies and spaces, saved by one library and loaded by the other."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch as th

import zipsave
import zipsave.sb3
from zipsave._tools import diff

pytest.importorskip("stable_baselines3")
import gymnasium as gym  # noqa: E402
from stable_baselines3 import DQN, PPO  # noqa: E402
from stable_baselines3.common import utils  # noqa: E402


def _quietly(make, *args, **kwargs):
    """SB3's deprecated schedule helpers warn when called; the tests are about what follows."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return make(*args, **kwargs)


def _ppo(**kwargs):
    kwargs.setdefault("policy_kwargs", {"net_arch": [8]})
    return PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=1, seed=0, **kwargs)


@pytest.fixture
def uninstalled():
    yield
    zipsave.sb3.uninstall()


# -- schedules made by SB3's helper functions -------------------------------------------------
def _schedule_model():
    linear = _quietly(utils.get_linear_fn, 1e-3, 1e-4, 0.5)
    clip = _quietly(utils.get_schedule_fn, 0.3)  # a lambda around constant_fn(0.3)
    return _ppo(learning_rate=linear, clip_range=clip)


def _check_schedules(model):
    assert isinstance(model.learning_rate, utils.LinearSchedule)
    assert (model.learning_rate.start, model.learning_rate.end, model.learning_rate.end_fraction) == (1e-3, 1e-4, 0.5)
    assert isinstance(model.lr_schedule, utils.FloatSchedule)
    assert [model.lr_schedule(p) for p in (1.0, 0.75, 0.0)] == pytest.approx([1e-3, 5.5e-4, 1e-4])
    assert isinstance(model.clip_range, utils.FloatSchedule)
    assert model.clip_range(0.5) == 0.3  # not PPO's default 0.2


@pytest.mark.parametrize("saver", ["sb3", "zipsave"])
def test_closure_schedules_inside_floatschedule_are_rebuilt_by_zipsave_load(tmp_path, saver):
    # SB3 >= 2.7 wraps a closure passed as `learning_rate`/`clip_range` in FloatSchedule; the
    # pickle of that object was refused whole, and clip_range fell back to 0.2 with a warning.
    model = _schedule_model()
    path = tmp_path / "sched.zip"
    model.save(path) if saver == "sb3" else zipsave.save(model, path)
    report = zipsave.LoadReport()
    loaded = zipsave.load(path, cls=PPO, report=report)  # warnings are errors here
    _check_schedules(loaded)
    assert report.skipped == [] and report.notes == []


def test_closure_schedules_are_rebuilt_by_restore(tmp_path):
    # zipsave.restore(model, path), the in-place load, skipped them with three warnings.
    _schedule_model().save(tmp_path / "sched.zip")
    model = _ppo()
    zipsave.restore(model, tmp_path / "sched.zip")
    _check_schedules(model)


def test_closure_schedules_are_rebuilt_by_sb3_load_under_install(tmp_path, uninstalled):
    model = _schedule_model()
    model.save(tmp_path / "sched.zip")
    zipsave.sb3.install()
    _check_schedules(PPO.load(tmp_path / "sched.zip"))


@pytest.mark.parametrize("name", ["ppo_constant", "ppo_linear", "a2c", "dqn", "sac"])
def test_archives_of_sb3_before_2_7_keep_their_schedules_under_install(name, uninstalled):
    # tests/data/sb3_old: written by SB3 2.0, every schedule a pickled closure. SB3's own load
    # under install() skipped them all (a linear clip_range became PPO's constant 0.2).
    import json
    import pathlib

    from stable_baselines3 import A2C, SAC

    folder = pathlib.Path(__file__).parent / "data" / "sb3_old"
    expected = json.loads((folder / "expected.json").read_text())["models"][name]
    cls = {"PPO": PPO, "A2C": A2C, "DQN": DQN, "SAC": SAC}[expected["class"]]
    zipsave.sb3.install()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the one note every door gives on DQN < 2.4's optimizer state, and nothing else
        warnings.filterwarnings("ignore", "archive .* comes from DQN of SB3 < 2.4", zipsave.ZipsaveWarning)
        model = cls.load(folder / f"{name}.zip")
    assert [model.lr_schedule(p) for p in (1.0, 0.5, 0.0)] == pytest.approx(expected["lr_schedule"])
    if "clip_range" in expected:
        assert [model.clip_range(p) for p in (1.0, 0.5, 0.0)] == pytest.approx(expected["clip_range"])


def test_dqn_exploration_schedule_from_get_linear_fn_is_rebuilt(tmp_path, uninstalled):
    model = DQN(
        "MlpPolicy",
        "CartPole-v1",
        learning_starts=8,
        buffer_size=64,
        policy_kwargs={"net_arch": [8]},
        learning_rate=_quietly(utils.get_linear_fn, 1e-3, 0.0, 1.0),
        seed=0,
    )
    model.exploration_schedule = _quietly(utils.get_linear_fn, 1.0, 0.1, 0.2)
    model.save(tmp_path / "dqn.zip")
    zipsave.sb3.install()
    for loaded in (zipsave.load(tmp_path / "dqn.zip", cls=DQN), DQN.load(tmp_path / "dqn.zip")):
        assert isinstance(loaded.learning_rate, utils.LinearSchedule)
        assert loaded.lr_schedule(0.5) == pytest.approx(5e-4)
        assert isinstance(loaded.exploration_schedule, utils.LinearSchedule)


# -- values that cannot be decoded: named, with the fix ---------------------------------------
def _local_extractor():
    """A features extractor class defined inside a function: cloudpickle stores it as code."""
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class LocalExtractor(BaseFeaturesExtractor):
        def __init__(self, observation_space, features_dim=8):
            super().__init__(observation_space, features_dim)
            self.linear = th.nn.Linear(observation_space.shape[0], features_dim)

        def forward(self, observations):
            return self.linear(observations)

    return LocalExtractor


BY_VALUE = (
    "The value holds `test_sb3_wide.LocalExtractor`, which cloudpickle stored as code, not by import path (it "
    "does so for a class defined in `__main__` (a script or notebook), inside a function, or in a module it "
    "could not import), so `trusted=` cannot admit it."
)


@pytest.fixture(params=["sb3", "zipsave"])
def by_value_archive(tmp_path, request):
    extractor = _local_extractor()
    model = _ppo(policy_kwargs={"net_arch": [8], "features_extractor_class": extractor})
    if request.param == "sb3":
        model.save(tmp_path / "ext.zip")
    else:  # zipsave says at save time that a safe load will skip it
        with pytest.warns(
            zipsave.ZipsaveWarning, match=re.escape("`policy_kwargs` holds code that cloudpickle stores by value")
        ):
            zipsave.save(model, tmp_path / "ext.zip")
    return model, extractor, tmp_path / "ext.zip"


def test_a_class_stored_by_value_is_named_and_trusted_is_not_suggested(by_value_archive):
    _, _, path = by_value_archive
    with pytest.raises(zipsave.DecodeError) as caught:
        zipsave.load(path, cls=PPO)
    err = caught.value
    assert (err.archive, err.member, err.key) == (str(path), "data", "policy_kwargs")
    assert BY_VALUE in str(err)
    assert str(err).endswith("Provide the value with `custom_objects={'policy_kwargs': ...}`.")
    assert "trust the global named above" not in str(err)


def test_sb3_load_under_install_names_an_undecodable_policy_kwargs(by_value_archive, uninstalled):
    # It failed in load_state_dict with a size mismatch: the default net_arch had been built.
    _, _, path = by_value_archive
    zipsave.sb3.install()
    with pytest.raises(zipsave.DecodeError) as caught:  # said once, by the error: no warning before it
        PPO.load(path)
    err = caught.value
    assert (err.archive, err.member, err.key) == (str(path), "data", "policy_kwargs")
    assert str(err).startswith(
        f"archive `{path}`, member `data`, key `policy_kwargs`: cannot build PPO: `policy_kwargs` could not be "
        "decoded and PPO needs it (`policy_kwargs`: refusing to import untrusted global "
        "`cloudpickle.cloudpickle._make_skeleton_class`."
    )
    assert BY_VALUE in str(err)
    assert str(err).endswith("Provide the value with `custom_objects={'policy_kwargs': ...}`.")
    with pytest.raises(zipsave.DecodeError) as same:  # the same mistake, the same message, whichever door
        zipsave.load(path, cls=PPO)
    assert str(same.value) == str(err)


@pytest.mark.parametrize("key", ["observation_space", "policy_class"])
def test_sb3_load_under_install_names_an_undecodable_required_key(tmp_path, uninstalled, key):
    import string  # any class outside the allowlist

    model = _ppo()
    setattr(model, key, string.Template("n"))  # stands for a value whose class is not trusted
    model.save(tmp_path / "m.zip")
    zipsave.sb3.install()
    with pytest.raises(
        zipsave.DecodeError, match=re.escape(f"cannot build PPO: `{key}` could not be decoded")
    ) as caught:
        PPO.load(tmp_path / "m.zip")
    assert caught.value.key == key
    assert "trust the global named above with `trusted=[...]` (`zipsave.sb3.install(trusted=[...])`" in str(
        caught.value
    )


def test_a_class_stored_by_value_loads_when_the_caller_passes_the_value(by_value_archive, uninstalled):
    model, extractor, path = by_value_archive
    kwargs = {"net_arch": [8], "features_extractor_class": extractor}
    obs = np.zeros(4, dtype=np.float32)
    expected = model.predict(obs, deterministic=True)[0]
    loaded = zipsave.load(path, cls=PPO, env=gym.make("CartPole-v1"), custom_objects={"policy_kwargs": kwargs})
    assert loaded.predict(obs, deterministic=True)[0] == expected
    loaded.learn(32, reset_num_timesteps=False)
    zipsave.sb3.install()
    assert PPO.load(path, custom_objects={"policy_kwargs": kwargs}).predict(obs, deterministic=True)[0] == expected


# -- zipsave diff ------------------------------------------------------------------------------
def _save_by_value(model, path, saver):
    """Save a model holding a class cloudpickle stores by value; zipsave warns that a safe load
    will skip it, plain SB3 says nothing."""
    if saver == "sb3":
        model.save(path)
        return
    with pytest.warns(zipsave.ZipsaveWarning, match="holds code that cloudpickle stores by value"):
        zipsave.save(model, path)


@pytest.mark.parametrize("saver", ["sb3", "zipsave"])
def test_diff_sees_equal_undecodable_values_as_equal(tmp_path, saver):
    # Each class cloudpickle stores by value gets a random tracker id, so two saves of the same
    # model from two runs differ in those bytes: diff reported `policy_kwargs: <dict> -> <dict>`.
    paths = []
    for name in ("a", "b"):
        th.manual_seed(0)
        model = _ppo(policy_kwargs={"net_arch": [8], "features_extractor_class": _local_extractor()})
        model.start_time = 0
        paths.append(tmp_path / f"{name}.zip")
        _save_by_value(model, paths[-1], saver)
    result = diff(*paths)
    assert result.identical and result.data_changed == ()
    assert "policy_kwargs" in result.data_stored_differently
    assert "= data    policy_kwargs: same value, stored differently" in str(result)

    model.policy_kwargs = {"net_arch": [9], "features_extractor_class": model.policy_kwargs["features_extractor_class"]}
    _save_by_value(model, tmp_path / "c.zip", saver)
    changed = diff(paths[1], tmp_path / "c.zip")
    assert [c.name for c in changed.data_changed] == ["policy_kwargs"]


# -- SB3 values the allowlist missed ------------------------------------------------------------
TORCH_PICKLE = (
    "skipped key `weights` of member `data` (type <class 'torch.Tensor'>): refusing to import untrusted global "
    "`torch._utils._rebuild_sparse_tensor`. It rebuilds a kind of tensor (sparse, quantized, ...) that zipsave "
    "reads from a torch pickle only when dense; torch's own helpers run `torch.load` without `weights_only`"
)


def test_a_tensor_pickled_by_sb3_loads_weights_only_and_other_torch_rebuilds_are_refused(tmp_path):
    # A dense tensor attribute (SB3 pickles it in `data`) is read through weights-only stand-ins
    # of torch's helpers. Other rebuild helpers stay refused, and the hint never suggests
    # `trusted=` for them (a step towards `torch.load` with pickle on).
    model = _ppo()
    model.probe = th.arange(3.0)
    model.sparse = th.eye(2).to_sparse()
    model.save(tmp_path / "m.zip")
    with pytest.warns(zipsave.SkippedEntryWarning) as caught:
        loaded = zipsave.load(tmp_path / "m.zip", cls=PPO)
    assert th.equal(loaded.probe, th.arange(3.0))
    assert [str(w.message).split("`")[3] for w in caught] == ["sparse"]
    message = str(caught[0].message).replace("`sparse`", "`weights`")
    assert TORCH_PICKLE in message and "trusted=" not in message
    assert not hasattr(loaded, "sparse")
    assert th.equal(zipsave.load(tmp_path / "m.zip", cls=PPO, custom_objects={"sparse": th.ones(3)}).sparse, th.ones(3))


def _zipsave_warnings(caught):
    return [str(w.message) for w in caught if issubclass(w.category, zipsave.ZipsaveWarning)]


def test_vectorized_action_noise_loads_safely(tmp_path, uninstalled):
    # SB3's own noise wrapper for several envs was refused: the model went on training without noise.
    from stable_baselines3 import TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise, VectorizedActionNoise

    noise = VectorizedActionNoise(NormalActionNoise(np.zeros(1), np.full(1, 0.3)), n_envs=2)
    model = TD3(
        "MlpPolicy",
        make_vec_env("Pendulum-v1", 2),
        action_noise=noise,
        learning_starts=8,
        buffer_size=64,
        batch_size=8,
        policy_kwargs={"net_arch": [8]},
        seed=0,
    )
    model.save(tmp_path / "td3.zip")
    zipsave.sb3.install()
    for loaded in (
        zipsave.load(tmp_path / "td3.zip", cls=TD3, env=make_vec_env("Pendulum-v1", 2)),
        TD3.load(tmp_path / "td3.zip", env=make_vec_env("Pendulum-v1", 2)),
    ):
        assert isinstance(loaded.action_noise, VectorizedActionNoise)
        assert loaded.action_noise.n_envs == 2
        assert loaded.action_noise.base_noise._sigma.tolist() == [0.3]
        loaded.learn(16, reset_num_timesteps=False)


def test_n_step_replay_buffer_class_loads_safely(tmp_path):
    import inspect

    from stable_baselines3 import SAC

    if "n_steps" not in inspect.signature(SAC).parameters:  # n-step returns came with SB3 2.7
        pytest.skip("this SB3 has no n-step returns")
    from stable_baselines3.common.buffers import NStepReplayBuffer

    model = SAC(
        "MlpPolicy",
        "Pendulum-v1",
        n_steps=3,
        learning_starts=8,
        buffer_size=64,
        batch_size=8,
        policy_kwargs={"net_arch": [8]},
        seed=0,
    )
    model.learn(16)
    model.save(tmp_path / "sac.zip")
    model.save_replay_buffer(tmp_path / "buffer.pkl")  # SB3's pickle
    report = zipsave.LoadReport()
    with warnings.catch_warnings(record=True) as caught:  # SB3's own "`n_steps=3` is ignored" note may come
        warnings.simplefilter("always")
        loaded = zipsave.load(tmp_path / "sac.zip", cls=SAC, env=gym.make("Pendulum-v1"), report=report)
    assert _zipsave_warnings(caught) == [] and report.skipped == []
    assert loaded.replay_buffer_class is NStepReplayBuffer and isinstance(loaded.replay_buffer, NStepReplayBuffer)
    assert loaded.replay_buffer.n_steps == 3
    with zipsave.sb3.installed():  # SB3's pickle of the buffer, read by the restricted unpickler
        loaded.load_replay_buffer(tmp_path / "buffer.pkl")
    assert isinstance(loaded.replay_buffer, NStepReplayBuffer) and loaded.replay_buffer.pos == model.replay_buffer.pos
    loaded.learn(16, reset_num_timesteps=False)


# -- every algorithm, non-default policies and spaces, both directions -------------------------
class _SpacesEnv(gym.Env):
    """A tiny env over Dict (Box, Discrete, MultiBinary) or Box observations and any action space."""

    def __init__(self, obs="dict", act="multidiscrete"):
        spaces = gym.spaces
        box = spaces.Box(-1, 1, (3,), np.float32)
        self.observation_space = (
            spaces.Dict({"a": box, "b": spaces.Discrete(4), "c": spaces.MultiBinary(2)}) if obs == "dict" else box
        )
        self.action_space = {
            "multidiscrete": spaces.MultiDiscrete([2, 3]),
            "multibinary": spaces.MultiBinary(3),
            "box": spaces.Box(-1, 1, (2,), np.float32),
            "discrete": spaces.Discrete(3),
        }[act]
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.steps = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.steps += 1
        return self.observation_space.sample(), 1.0, self.steps >= 10, False, {}

    def action_masks(self):
        space = self.action_space
        return np.ones(space.n if hasattr(space, "n") else int(sum(space.nvec)), dtype=bool)


ON_POLICY = {
    "net_arch": {"pi": [8, 8], "vf": [6]},
    "activation_fn": th.nn.Tanh,
    "optimizer_class": th.optim.RMSprop,
    "optimizer_kwargs": {"alpha": 0.9},
    "share_features_extractor": False,
    "ortho_init": False,
}
OFF_POLICY = {
    "net_arch": {"pi": [8], "qf": [6, 6]},
    "activation_fn": th.nn.ELU,
    "optimizer_class": th.optim.AdamW,
    "normalize_images": False,
}
BUFFER = {"learning_starts": 8, "buffer_size": 64, "batch_size": 8}
ROLLOUT = {"n_steps": 16, "batch_size": 8, "n_epochs": 1}
CASES = {
    "A2C": (
        "stable_baselines3",
        "A2C",
        "MlpPolicy",
        ("box", "multibinary"),
        {"n_steps": 8, "policy_kwargs": ON_POLICY},
    ),
    "PPO-dict": (
        "stable_baselines3",
        "PPO",
        "MultiInputPolicy",
        ("dict", "multidiscrete"),
        {**ROLLOUT, "policy_kwargs": {"net_arch": [8], "normalize_images": False}},
    ),
    "PPO-sde": (
        "stable_baselines3",
        "PPO",
        "MlpPolicy",
        ("box", "box"),
        {**ROLLOUT, "use_sde": True, "policy_kwargs": {"net_arch": [8], "log_std_init": -1.0, "use_expln": True}},
    ),
    "SAC": ("stable_baselines3", "SAC", "MlpPolicy", ("box", "box"), {**BUFFER, "policy_kwargs": OFF_POLICY}),
    "SAC-dict": (
        "stable_baselines3",
        "SAC",
        "MultiInputPolicy",
        ("dict", "box"),
        {**BUFFER, "policy_kwargs": {"net_arch": [8]}},
    ),
    "TD3": (
        "stable_baselines3",
        "TD3",
        "MlpPolicy",
        ("box", "box"),
        {
            **BUFFER,
            "policy_kwargs": {"net_arch": {"pi": [8], "qf": [8]}, "n_critics": 1, "share_features_extractor": True},
        },
    ),
    "DDPG": ("stable_baselines3", "DDPG", "MlpPolicy", ("box", "box"), {**BUFFER, "policy_kwargs": {"net_arch": [8]}}),
    "DQN-dict": (
        "stable_baselines3",
        "DQN",
        "MultiInputPolicy",
        ("dict", "discrete"),
        {
            **BUFFER,
            "policy_kwargs": {"net_arch": [8], "optimizer_class": th.optim.SGD, "optimizer_kwargs": {"momentum": 0.5}},
        },
    ),
    "TQC": (
        "sb3_contrib",
        "TQC",
        "MlpPolicy",
        ("box", "box"),
        {**BUFFER, "policy_kwargs": {"net_arch": [8], "n_quantiles": 5, "activation_fn": th.nn.LeakyReLU}},
    ),
    "QRDQN": (
        "sb3_contrib",
        "QRDQN",
        "MlpPolicy",
        ("box", "discrete"),
        {**BUFFER, "policy_kwargs": {"net_arch": [8], "n_quantiles": 5}},
    ),
    "TRPO": (
        "sb3_contrib",
        "TRPO",
        "MlpPolicy",
        ("box", "multidiscrete"),
        {"n_steps": 16, "batch_size": 8, "policy_kwargs": ON_POLICY},
    ),
    "ARS": (
        "sb3_contrib",
        "ARS",
        "MlpPolicy",
        ("box", "box"),
        {"n_delta": 2, "n_eval_episodes": 1, "policy_kwargs": {"net_arch": [8]}},
    ),
    "RecurrentPPO": (
        "sb3_contrib",
        "RecurrentPPO",
        "MultiInputLstmPolicy",
        ("dict", "discrete"),
        {**ROLLOUT, "policy_kwargs": {"net_arch": [8], "lstm_hidden_size": 8, "enable_critic_lstm": True}},
    ),
    "MaskablePPO": (
        "sb3_contrib",
        "MaskablePPO",
        "MultiInputPolicy",
        ("dict", "multidiscrete"),
        {**ROLLOUT, "policy_kwargs": {"net_arch": [8]}},
    ),
    "CrossQ": ("sb3_contrib", "CrossQ", "MlpPolicy", ("box", "box"), {**BUFFER, "policy_kwargs": {"net_arch": [8]}}),
}


@pytest.mark.parametrize("direction", ["sb3 -> zipsave", "zipsave -> sb3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_algorithm_round_trips_and_trains_on(tmp_path, case, direction):
    package, name, policy, spaces, kwargs = CASES[case]
    cls = getattr(pytest.importorskip(package), name, None)
    if cls is None:  # CrossQ came with sb3-contrib 2.5
        pytest.skip(f"this {package} has no {name}")
    th.manual_seed(0)
    model = cls(policy, _SpacesEnv(*spaces), seed=0, **kwargs)
    model.learn(24)
    path = tmp_path / "model.zip"
    report = zipsave.LoadReport()
    if direction == "sb3 -> zipsave":
        model.save(path)
        loaded = zipsave.load(path, cls=cls, env=_SpacesEnv(*spaces), report=report)
        # ARS's flat copy of its weights is a tensor SB3 pickles; it is taken from the loaded policy.
        assert [entry.key for entry in report.skipped] == []  # ARS's pickled `weights` decode weights-only
    else:
        zipsave.save(model, path)
        loaded = cls.load(path, env=_SpacesEnv(*spaces))
    assert loaded.policy_kwargs == model.policy_kwargs
    assert type(loaded.policy.optimizer) is type(model.policy.optimizer) if hasattr(model.policy, "optimizer") else True
    for key, tensor in model.policy.state_dict().items():
        assert th.equal(loaded.policy.state_dict()[key], tensor), key
    observations = model.observation_space
    observations.seed(1)
    for _ in range(3):
        obs = observations.sample()
        np.testing.assert_array_equal(
            loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0]
        )
    loaded.learn(16, reset_num_timesteps=False)
    assert loaded.num_timesteps > model.num_timesteps


@pytest.mark.parametrize("saver", ["sb3", "zipsave"])
def test_ars_goes_on_from_the_loaded_weights(tmp_path, saver, uninstalled):
    # ARS searches around `weights`, copied from the policy in `_setup_model` before the saved
    # parameters are loaded: with zero_policy=False a loaded ARS (ARS.load under install() too)
    # went on training from freshly initialised weights.
    ars = pytest.importorskip("sb3_contrib").ARS
    model = ars(
        "LinearPolicy", "Pendulum-v1", n_delta=2, n_eval_episodes=1, learning_rate=0.5, zero_policy=False, seed=0
    )
    model.learn(600)
    model.save(tmp_path / "ars.zip") if saver == "sb3" else zipsave.save(model, tmp_path / "ars.zip")
    report = zipsave.LoadReport()
    loaded = zipsave.load(tmp_path / "ars.zip", cls=ars, env=gym.make("Pendulum-v1"), report=report)
    assert th.equal(loaded.weights, model.weights)
    assert th.equal(loaded.weights, th.nn.utils.parameters_to_vector(loaded.policy.parameters()))
    # SB3 pickled the tensor: read through the weights-only stand-ins of torch's helpers.
    assert [e.key for e in report.skipped] == []
    loaded.learn(200, reset_num_timesteps=False)
    zipsave.sb3.install()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the pickled copy is not decoded, so nothing is skipped
        own = ars.load(tmp_path / "ars.zip", env=gym.make("Pendulum-v1"))
    assert th.equal(own.weights, model.weights)


@pytest.mark.parametrize("source", ["ZOO_2_6", "ZOO_1_0"])
def test_a_zoo_closure_inside_sb3_get_schedule_fn_is_rebuilt(tmp_path, source, uninstalled):
    # SB3 < 2.7 stored a Zoo schedule passed as `clip_range` (`clip_range: lin_0.2`) wrapped by
    # get_schedule_fn; neither recogniser took the pair apart, and clip_range became 0.2 flat.
    pytest.importorskip("rl_zoo3")
    import test_rl_zoo

    closure = test_rl_zoo.zoo_closure(getattr(test_rl_zoo, source), 0.2)
    _ppo(clip_range=_quietly(utils.get_schedule_fn, closure)).save(tmp_path / "zoo.zip")
    zipsave.sb3.install()
    for loaded in (zipsave.load(tmp_path / "zoo.zip", cls=PPO), PPO.load(tmp_path / "zoo.zip")):
        test_rl_zoo.assert_zoo_schedule(loaded.clip_range.value_schedule, 0.2)
        assert loaded.clip_range(0.5) == pytest.approx(0.1)


# -- policy.save / Policy.load under install() -------------------------------------------------
def test_recurrent_policy_file_keeps_its_lstm_settings(tmp_path, uninstalled):
    # sb3-contrib's recurrent policies leave their LSTM settings out of
    # `_get_constructor_parameters()`: Policy.load built a 256-unit LSTM and failed (SB3 too).
    contrib = pytest.importorskip("sb3_contrib")
    zipsave.sb3.install()
    model = contrib.RecurrentPPO(
        "MlpLstmPolicy",
        _SpacesEnv("box", "box"),
        n_steps=16,
        batch_size=8,
        seed=0,
        policy_kwargs={"net_arch": [8], "lstm_hidden_size": 8, "n_lstm_layers": 2, "enable_critic_lstm": True},
    )
    model.policy.save(tmp_path / "policy.zip")
    loaded = type(model.policy).load(tmp_path / "policy.zip")
    assert (loaded.lstm_actor.hidden_size, loaded.lstm_actor.num_layers) == (8, 2)
    for key, tensor in model.policy.state_dict().items():
        assert th.equal(loaded.state_dict()[key], tensor), key


def test_ars_linear_policy_file_loads(tmp_path, uninstalled):
    # ARSLinearPolicy records `net_arch`, which its constructor does not take (a TypeError, SB3 too).
    contrib = pytest.importorskip("sb3_contrib")
    zipsave.sb3.install()
    model = contrib.ARS("LinearPolicy", "Pendulum-v1", n_delta=2, seed=0)
    model.policy.save(tmp_path / "policy.zip")
    loaded = type(model.policy).load(tmp_path / "policy.zip")
    obs = np.ones(3, dtype=np.float32)
    np.testing.assert_array_equal(
        loaded.predict(obs, deterministic=True)[0], model.policy.predict(obs, deterministic=True)[0]
    )

    biased = contrib.ARS("LinearPolicy", "Pendulum-v1", n_delta=2, seed=0, policy_kwargs={"with_bias": True})
    biased.policy.save(tmp_path / "biased.zip")  # `with_bias` is recorded nowhere: named, not a bare RuntimeError
    with pytest.raises(
        zipsave.ParameterMismatchError,
        match=re.escape(
            "member `policy.pth`: the ARSLinearPolicy built from the saved constructor parameters does not fit the "
            "saved weights"
        ),
    ) as caught:
        type(biased.policy).load(tmp_path / "biased.zip")
    assert "ARSLinearPolicy._get_constructor_parameters() does not record every argument" in str(caught.value)


def test_load_archive_rebuilds_closure_schedules(tmp_path):
    # zipsave.load_archive mirrors SB3's load_from_zip_file, which returns the (unpickled)
    # closures; it skipped them with a warning each.
    _schedule_model().save(tmp_path / "sched.zip")
    data, _, _ = zipsave.load_archive(tmp_path / "sched.zip")
    assert isinstance(data["learning_rate"], utils.LinearSchedule) and data["learning_rate"](0.0) == pytest.approx(1e-4)
    assert data["clip_range"](0.5) == 0.3 and data["lr_schedule"](1.0) == pytest.approx(1e-3)
    kept = zipsave.load_archive(tmp_path / "sched.zip", custom_objects={"clip_range": 0.25})[0]
    assert kept["clip_range"] == 0.25  # the caller's value wins, never decoded
