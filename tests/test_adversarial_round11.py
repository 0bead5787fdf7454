"""Round eleven of the adversarial suite: SB3's ``save_util.load_from_pkl`` under ``install()``
(a door of its own, called by name), and random generator states numpy and torch take without
checking the position they read from next (``RNGState``, ``EnvState``, a ``torch.Generator``
in ``data``)."""

from __future__ import annotations

import base64
import io
import json
import pickle
import re
import struct
import zipfile

import numpy as np
import pytest

import zipsave

torch = pytest.importorskip("torch")
sb3 = pytest.importorskip("stable_baselines3")


# -- save_util.load_from_pkl: a door of its own --------------------------------------------------


def _object_archive(path, cls) -> str:
    """An object archive as ``save_replay_buffer`` writes one, naming ``cls`` (an allowlisted
    class) with attributes it cannot be rebuilt from."""
    zipsave.save_archive(path, data={"_zipsave_object_class": cls, "x": 1})
    return str(path)


def _classes():
    import gymnasium as gym
    from stable_baselines3.common.vec_env import VecNormalize

    return {
        "Box": gym.spaces.Box,  # its __setstate__: AttributeError ('low')
        "VecNormalize": VecNormalize,  # its __setstate__: KeyError ('observation_space')
        "dtype": np.dtype,  # its __new__: TypeError (a required argument)
        "Adam": torch.optim.Adam,  # Optimizer.__setstate__: AttributeError ('defaults')
    }


@pytest.mark.parametrize("name", ["Box", "VecNormalize", "dtype", "Adam"])
def test_load_from_pkl_names_an_object_its_attributes_do_not_rebuild(tmp_path, name):
    # The old tree let the class's own exception out of SB3's function, called by name under
    # install() (the RL Zoo and user code do): AttributeError, KeyError, TypeError.
    from stable_baselines3.common import save_util

    import zipsave.sb3

    path = _object_archive(tmp_path / "buffer.pkl", _classes()[name])
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.DecodeError, match=re.escape(f"holds a {name} that its saved attributes")) as caught:
            save_util.load_from_pkl(path)
    assert caught.value.key == "_zipsave_object_class" and caught.value.member == "data"
    assert str(tmp_path) in str(caught.value.archive)


def test_vec_normalize_load_names_a_url_it_cannot_open(tmp_path):
    # The old tree opened the file outside the door's boundary: a chained URL to a missing
    # file raised fsspec's bare FileNotFoundError from VecNormalize.load (load_replay_buffer
    # gave zipsave's ArchiveNotFoundError).
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    import zipsave.sb3

    url = f"zip://vec_normalize.pkl::file://{tmp_path}/missing.zip"
    with zipsave.sb3.installed(), pytest.raises(zipsave.ArchiveNotFoundError) as caught:
        VecNormalize.load(url, make_vec_env("CartPole-v1", n_envs=1))
    assert caught.value.archive == url


# -- random generator states: the position the next draw reads at -------------------------------


def _rng_app():
    generators = {
        "mt": np.random.Generator(np.random.MT19937(0)),
        "philox": np.random.Generator(np.random.Philox(0)),
        "legacy": np.random.RandomState(0),
        "torch": torch.Generator().manual_seed(0),
    }
    return {"rng": zipsave.RNGState(generators=generators)}


def _torch_past_its_words(state) -> torch.Tensor:
    raw = bytearray(state.numpy().tobytes())
    struct.pack_into("<iiQ", raw, 8, 624, 1, 624)  # left, seeded, next: each within 624, not together
    return torch.frombuffer(raw, dtype=torch.uint8).clone()


def _rewrite_rng(saved: bytes, change) -> io.BytesIO:
    return _rewrite_pth(saved, "rng.pth", change)


def _rewrite_pth(saved: bytes, member: str, change) -> io.BytesIO:
    """The archive ``saved`` with ``change`` applied to the state dict of ``member`` (torch's
    own writer, the manifest dropped): an archive as a hand-edited checkpoint would be."""
    with zipfile.ZipFile(io.BytesIO(saved)) as zf:
        items = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    state = torch.load(io.BytesIO(items[member]), weights_only=True)
    change(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    items[member] = buffer.getvalue()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, raw in items.items():
            zf.writestr(name, raw)
    out.seek(0)
    return out


def _snapshot(gen) -> bytes:
    if isinstance(gen, torch.Generator):
        return gen.get_state().numpy().tobytes()
    return pickle.dumps(gen.get_state() if isinstance(gen, np.random.RandomState) else gen.bit_generator.state)


def _set(path, value):
    def change(state):
        node = state
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value(node[path[-1]]) if callable(value) else value

    return change


RNG_PAST_THEIR_BUFFERS = {
    # what the next draw did after the old tree's restore
    "numpy-pos": (("numpy", "pos"), 10**8, "MT19937 state/pos is 100000000"),  # np.random: segfault
    "legacy-pos": (("generators", "legacy", "state", "pos"), 10**8, "MT19937 state/pos"),  # segfault
    "mt19937-pos": (("generators", "mt", "state", "state", "pos"), 10**8, "MT19937 state/pos"),  # segfault
    "philox-buffer_pos": (("generators", "philox", "state", "buffer_pos"), -(10**8), "Philox buffer_pos"),  # segfault
    "mt19937-pos-tensor": (
        ("generators", "mt", "state", "state", "pos"),
        torch.tensor(700),
        "MT19937 state/pos is 700",
    ),
    "torch-left-next": (("torch",), _torch_past_its_words, "left 624 and next 624"),  # heap bytes as numbers
    "torch-generator": (("generators", "torch", "state"), _torch_past_its_words, "left 624 and next 624"),
}


@pytest.mark.parametrize("case", RNG_PAST_THEIR_BUFFERS.values(), ids=RNG_PAST_THEIR_BUFFERS.keys())
def test_a_generator_state_read_past_its_buffer_is_refused_before_any_is_set(case):
    # numpy stores MT19937's pos and Philox's buffer_pos unchecked, torch checks left and next
    # of its Mersenne Twister apart: the old tree's restore set them, and the next draw read
    # far past the generator's buffer (a segfault) or handed back heap bytes as random numbers.
    path, value, message = case
    saved = io.BytesIO()
    zipsave.save(_rng_app(), saved)
    hostile = _rewrite_rng(saved.getvalue(), _set(path, value))
    app = _rng_app()
    before = {name: _snapshot(gen) for name, gen in app["rng"].generators.items()}
    numpy_before, torch_before = np.random.get_state(), torch.get_rng_state()
    try:
        with pytest.raises(zipsave.ZipsaveError, match=re.escape(message)) as caught:
            zipsave.restore(app, hostile)
    finally:  # the old tree left the process's generators so: never draw from them
        np.random.set_state(numpy_before)
        torch.set_rng_state(torch_before)
    assert caught.value.member == "rng.pth"
    for name, gen in app["rng"].generators.items():  # every state checked before any was set
        assert _snapshot(gen) == before[name]


def test_generator_states_numpy_and_torch_write_restore():
    app = _rng_app()
    for gen in app["rng"].generators.values():  # positions inside the buffers, not at their starts
        (gen.integers(0, 9, 1001) if hasattr(gen, "integers") else gen.randint(0, 9, 1001)) if not isinstance(
            gen, torch.Generator
        ) else torch.rand(1001, generator=gen)
    saved = io.BytesIO()
    zipsave.save(app, saved)
    expected = [
        float(torch.rand(1, generator=app["rng"].generators["torch"])),
        int(app["rng"].generators["mt"].integers(9**9)),
    ]
    other = _rng_app()
    saved.seek(0)
    zipsave.restore(other, saved)
    got = [
        float(torch.rand(1, generator=other["rng"].generators["torch"])),
        int(other["rng"].generators["mt"].integers(9**9)),
    ]
    assert got == expected


def test_a_torch_generator_in_data_read_past_its_state_is_refused():
    # A torch.Generator saved as a value of `data` was rebuilt with the state it held: left
    # and next of 624 each, and the generator load and read handed back drew heap bytes.
    gen = torch.Generator().manual_seed(3)
    saved = io.BytesIO()
    zipsave.save_archive(saved, data={"g": gen})
    with zipfile.ZipFile(io.BytesIO(saved.getvalue())) as zf:
        items = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    data = json.loads(items["data"])
    state = data["g"][":zipsave:"]["state"]
    raw = _torch_past_its_words(torch.frombuffer(bytearray(base64.b64decode(state["b64"])), dtype=torch.uint8))
    state["b64"] = base64.b64encode(raw.numpy().tobytes()).decode()
    items["data"] = json.dumps(data).encode()
    hostile = io.BytesIO()
    with zipfile.ZipFile(hostile, "w") as zf:
        for name, member in items.items():
            zf.writestr(name, member)
    for door in (lambda f: zipsave.read(f, "g"), lambda f: zipsave.load(f, strict=True)):
        hostile.seek(0)
        with pytest.raises(zipsave.DecodeError, match="left 624 and next 624") as caught:
            door(hostile)
        assert caught.value.key == "g" and caught.value.member == "data"


# -- an optimizer's saved state: tensors of their parameters' shapes --------------------------------


def _optimizer_archive(make, change) -> io.BytesIO:
    """A trained net and its optimizer saved as an app state, the optimizer's state changed."""
    torch.manual_seed(0)
    net = torch.nn.Linear(8, 8)
    opt = make(net.parameters())
    for _ in range(2):
        opt.zero_grad()
        net(torch.ones(8)).sum().backward()
        opt.step()
    return _rewritten_pth({"net": net, "opt": opt}, "opt.pth", change)


def _rewritten_pth(app_state, member, change) -> io.BytesIO:
    """``app_state`` saved, then ``member`` changed (:func:`_rewrite_pth`)."""
    saved = io.BytesIO()
    zipsave.save(app_state, saved)
    return _rewrite_pth(saved.getvalue(), member, change)


def _state_entry(key, value):
    def change(state):
        state["state"][0][key] = value

    return change


def _tuple_ids(state):  # torch maps any saved id to its parameter, a tuple too
    state["param_groups"][0]["params"] = [(0,), 1]
    state["state"] = {(0,): {**state["state"][0], "exp_avg": torch.zeros(1)}, 1: state["state"][1]}


_ADAM = torch.optim.Adam
OPTIMIZER_STATES = {
    # what the first step of the fresh optimizer did after the old tree's restore (with
    # fused=True: wrote past the saved tensor, a segfault; these cases use the unfused kernels)
    "adam-exp_avg-1": (_ADAM, _state_entry("exp_avg", torch.zeros(1)), "state.0.exp_avg"),  # RuntimeError
    "adam-exp_avg-flat": (_ADAM, _state_entry("exp_avg_sq", torch.zeros(64)), "state.0.exp_avg_sq"),
    "adam-step-empty": (_ADAM, _state_entry("step", torch.zeros(0)), "state.0.step"),  # RuntimeError
    "adam-tuple-id": (_ADAM, _tuple_ids, "state.(0,).exp_avg"),
    "sgd-momentum": (
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        _state_entry("momentum_buffer", torch.zeros(9, 9)),
        "state.0.momentum_buffer",
    ),
    "rmsprop-square_avg": (torch.optim.RMSprop, _state_entry("square_avg", torch.zeros(8)), "state.0.square_avg"),
}


@pytest.mark.parametrize("case", OPTIMIZER_STATES.values(), ids=OPTIMIZER_STATES.keys())
def test_an_optimizer_state_that_does_not_fit_its_parameters_is_refused(case):
    # A fresh optimizer holds no state to compare the saved one with: the old tree's restore
    # handed torch's load_state_dict whatever tensors the archive held.
    make, change, key = case
    hostile = _optimizer_archive(make, change)
    net = torch.nn.Linear(8, 8)
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape(f"`{key}`: saved shape")) as caught:
        zipsave.restore({"net": net, "opt": make(net.parameters())}, hostile)
    assert caught.value.member == "opt.pth"


def _optimizers():
    optim = torch.optim
    made = {
        "Adam-amsgrad": lambda p: optim.Adam(p, amsgrad=True),
        "Adam-fused": lambda p: optim.Adam(p, fused=True),
        "AdamW": optim.AdamW,
        "Adamax": optim.Adamax,
        "NAdam": optim.NAdam,
        "RAdam": optim.RAdam,
        "SGD-momentum-fused": lambda p: optim.SGD(p, lr=0.1, momentum=0.9, fused=True),
        "SGD": lambda p: optim.SGD(p, lr=0.1),
        "RMSprop-centered": lambda p: optim.RMSprop(p, momentum=0.9, centered=True),
        "Adagrad": optim.Adagrad,
        "Adadelta": optim.Adadelta,
        "ASGD": optim.ASGD,
        "Rprop": optim.Rprop,
        "LBFGS": optim.LBFGS,
    }
    if hasattr(optim, "Adafactor"):
        made["Adafactor"] = optim.Adafactor
    return made


@pytest.mark.parametrize("name", list(_optimizers()))
def test_what_torchs_optimizers_save_restores_into_fresh_ones(name):
    make = _optimizers()[name]

    def trained():
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
        return net, make(net.parameters())

    def step(net, opt):
        def closure():
            opt.zero_grad()
            loss = net(torch.ones(2, 3)).square().sum()
            loss.backward()
            return loss

        opt.step(closure)

    net, opt = trained()
    for _ in range(3):
        step(net, opt)
    saved = io.BytesIO()
    zipsave.save({"net": net, "opt": opt}, saved)
    fresh_net, fresh_opt = trained()
    saved.seek(0)
    zipsave.restore({"net": fresh_net, "opt": fresh_opt}, saved, strict=True)
    step(net, opt)
    step(fresh_net, fresh_opt)
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), fresh_net.parameters()))


def test_sb3_load_refuses_an_optimizer_state_its_first_learn_cannot_use(tmp_path):
    import gymnasium as gym

    import zipsave.sb3

    model = sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=8, n_epochs=1, device="cpu", seed=0)
    model.learn(16)
    model.save(tmp_path / "ppo.zip")
    with zipfile.ZipFile(tmp_path / "ppo.zip") as zf:
        items = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    state = torch.load(io.BytesIO(items["policy.optimizer.pth"]), weights_only=True)
    state["state"][0]["exp_avg"] = torch.zeros(1)  # the first learn: RuntimeError (fused: a segfault)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    items["policy.optimizer.pth"] = buffer.getvalue()
    with zipfile.ZipFile(tmp_path / "hostile.zip", "w") as zf:
        for name, raw in items.items():
            zf.writestr(name, raw)
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape("`state.0.exp_avg`: saved shape (1,)")):
        zipsave.load(tmp_path / "hostile.zip", cls=sb3.PPO, env=gym.make("CartPole-v1"), device="cpu")
    with zipsave.sb3.installed(), pytest.raises(zipsave.ParameterMismatchError, match="state.0.exp_avg"):
        sb3.PPO.load(tmp_path / "hostile.zip", env=gym.make("CartPole-v1"), device="cpu")


def _group_setting(key, value):
    def change(state):
        state["param_groups"][0][key] = value

    return change


OPTIMIZER_SETTINGS = {
    # what the first step did after the old tree's restore
    "lr-1000-elements": ("lr", torch.zeros(1000)),  # RuntimeError: a Tensor with 1000 elements
    "lr-nan": ("lr", float("nan")),  # every weight NaN (torch's constructor refuses NaN)
    "betas-one": ("betas", (0.9,)),  # ValueError: not enough values to unpack
    "eps-empty": ("eps", torch.zeros(0)),  # RuntimeError
    "amsgrad-text": ("amsgrad", "yes"),
}


@pytest.mark.parametrize("case", OPTIMIZER_SETTINGS.values(), ids=OPTIMIZER_SETTINGS.keys())
def test_an_optimizer_setting_of_another_kind_is_refused(case):
    key, value = case
    hostile = _optimizer_archive(_ADAM, _group_setting(key, value))
    net = torch.nn.Linear(8, 8)
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape(f"`param_groups.0.{key}` is not")) as caught:
        zipsave.restore({"net": net, "opt": _ADAM(net.parameters())}, hostile)
    assert caught.value.key == f"param_groups.0.{key}"


# -- a learning-rate scheduler's saved state: its own names, of their kinds ------------------------


class _Decay:
    """A callable object as a LambdaLR's lambda (torch saves its attributes)."""

    def __init__(self, rate):
        self.rate = rate

    def __call__(self, epoch):
        return self.rate**epoch


def _schedulers():
    lr = torch.optim.lr_scheduler
    return {
        "StepLR": lambda o: lr.StepLR(o, 2),
        "MultiStepLR": lambda o: lr.MultiStepLR(o, [1, 3]),
        "LambdaLR-function": lambda o: lr.LambdaLR(o, lambda e: 0.9**e),
        "LambdaLR-object": lambda o: lr.LambdaLR(o, _Decay(0.8)),
        "MultiplicativeLR": lambda o: lr.MultiplicativeLR(o, _Decay(0.95)),
        "ExponentialLR": lambda o: lr.ExponentialLR(o, 0.9),
        "CosineAnnealingLR": lambda o: lr.CosineAnnealingLR(o, 10),
        "CosineAnnealingWarmRestarts": lambda o: lr.CosineAnnealingWarmRestarts(o, 3),
        "OneCycleLR": lambda o: lr.OneCycleLR(o, 1.0, total_steps=20),
        "CyclicLR": lambda o: lr.CyclicLR(o, 0.01, 0.1, step_size_up=2),
        "ReduceLROnPlateau": lambda o: lr.ReduceLROnPlateau(o, patience=0),
        "SequentialLR": lambda o: lr.SequentialLR(o, [lr.ConstantLR(o, 0.5), lr.ExponentialLR(o, 0.9)], [2]),
        "ChainedScheduler": lambda o: lr.ChainedScheduler([lr.ConstantLR(o, 0.5), lr.ExponentialLR(o, 0.9)]),
        "PolynomialLR": lambda o: lr.PolynomialLR(o, 10),
        "LinearLR": lambda o: lr.LinearLR(o),
    }


def _scheduled(name):
    torch.manual_seed(0)
    net = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    return net, opt, _schedulers()[name](opt)


def _advance(opt, scheduler, steps=3):
    for i in range(steps):
        opt.step()
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            scheduler.step(1.0 + i)
        else:
            scheduler.step()


@pytest.mark.parametrize("name", list(_schedulers()))
def test_what_torchs_schedulers_save_restores(name):
    net, opt, scheduler = _scheduled(name)
    _advance(opt, scheduler)
    saved = io.BytesIO()
    zipsave.save({"net": net, "opt": opt, "sched": scheduler}, saved)
    fresh = dict(zip(("net", "opt", "sched"), _scheduled(name)))
    saved.seek(0)
    zipsave.restore(fresh, saved, strict=True)
    _advance(opt, scheduler)
    _advance(fresh["opt"], fresh["sched"])
    assert fresh["opt"].param_groups[0]["lr"] == opt.param_groups[0]["lr"]


def _scheduler_archive(name, change) -> io.BytesIO:
    net, opt, scheduler = _scheduled(name)
    _advance(opt, scheduler)
    return _rewritten_pth({"net": net, "opt": opt, "sched": scheduler}, "sched.pth", change)


def _put(*path_and_value):
    *path, value = path_and_value

    def change(state):
        node = state
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value

    return change


SCHEDULER_STATES = {
    # what the old tree's restore did: torch's load_state_dict set each name as an attribute
    "optimizer": ("StepLR", _put("optimizer", 5), "optimizer"),  # the scheduler's optimizer replaced
    "get_lr": ("StepLR", _put("get_lr", 5), "get_lr"),  # its method shadowed: TypeError at step
    "step": ("StepLR", _put("step", 5), "step"),
    "dunder": ("StepLR", _put("__class__", 5), "__class__"),
    "base_lrs-empty": ("StepLR", _put("base_lrs", []), "base_lrs"),  # lr of no group
    "last_epoch-text": ("StepLR", _put("last_epoch", "x"), "last_epoch"),  # TypeError at step
    "sequential-child-optimizer": ("SequentialLR", _put("_schedulers", 0, "optimizer", 5), "_schedulers.0.optimizer"),
    "lambda-function-attributes": ("LambdaLR-function", _put("lr_lambdas", [{"__code__": 1}]), "lr_lambdas.0"),
    "lambda-object-attributes": ("LambdaLR-object", _put("lr_lambdas", [{"rate": 0.5, "zz": 1}]), "lr_lambdas.0"),
}


@pytest.mark.parametrize("case", SCHEDULER_STATES.values(), ids=SCHEDULER_STATES.keys())
def test_a_scheduler_state_naming_what_is_not_its_state_is_refused(case):
    name, change, key = case
    hostile = _scheduler_archive(name, change)
    net, opt, scheduler = _scheduled(name)
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape(f"`{key}`")) as caught:
        zipsave.restore({"net": net, "opt": opt, "sched": scheduler}, hostile)
    assert caught.value.member == "sched.pth"
    assert scheduler.optimizer is opt and "get_lr" not in vars(scheduler)


# -- EnvState: what it sets in live environments ----------------------------------------------------


def _normalized_cartpole():
    import gymnasium as gym

    env = gym.wrappers.NormalizeObservation(gym.make("CartPole-v1"))
    env.reset(seed=0)
    return env


def _env_archive(change) -> io.BytesIO:
    env = _normalized_cartpole()
    for _ in range(5):
        env.step(env.action_space.sample())
    return _rewritten_pth({"env": zipsave.EnvState(env)}, "env.pth", change)


def _stored_array(data, dtype="<f8"):
    return {":type:": "numpy.ndarray", "dtype": dtype, "shape": list(data.shape), "data": data}


ENV_STATES = {
    # what the first step did after the old tree's restore
    "statistics-method": (_put("env.0", "objects", "obs_rms", "update", 5), "env.0.obs_rms.update"),  # TypeError
    "statistics-shape": (
        _put("env.0", "objects", "obs_rms", "mean", _stored_array(torch.zeros(7, dtype=torch.float64))),
        "env.0.obs_rms.mean",  # ValueError: operands could not be broadcast
    ),
    "statistics-objects": (
        _put("env.0", "objects", "obs_rms", "var", _stored_array(torch.ones(4, dtype=torch.float64), "|O")),
        "env.0.obs_rms.var",  # TypeError: no callable sqrt method (an array of Python floats)
    ),
    "statistics-count-text": (_put("env.0", "objects", "obs_rms", "count", "x"), "env.0.obs_rms.count"),
    "statistics-subarray-dtype": (  # each of the 4 stored numbers rebuilt as 216 MB (RSS 1 GB)
        _put(
            "env.0", "objects", "obs_rms", "var", _stored_array(torch.ones(4, dtype=torch.float64), "(300,300,300)f8")
        ),
        "env.0.obs_rms.var",
    ),
    "elapsed-steps-text": (_put("env.1", "attrs", "_elapsed_steps", "x"), "env.1._elapsed_steps"),  # TypeError
}


@pytest.mark.parametrize("case", ENV_STATES.values(), ids=ENV_STATES.keys())
def test_an_env_state_that_does_not_fit_the_environments_is_refused_before_any_is_set(case):
    change, key = case
    hostile = _env_archive(change)
    env = _normalized_cartpole()
    before = env.obs_rms.mean.copy()
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape(f"`{key}`")) as caught:
        zipsave.restore({"env": zipsave.EnvState(env)}, hostile)
    assert caught.value.member == "env.pth"
    assert "update" not in vars(env.obs_rms) and np.array_equal(env.obs_rms.mean, before)
    env.step(env.action_space.sample())
