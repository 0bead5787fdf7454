"""App-state dicts (TorchSnapshot's take/restore) and RNGState: a resumed run is bit-identical."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
import torch

import zipsave


def make(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 2))
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, optim


def step(model, optim) -> list:
    """One update whose randomness comes from torch (dropout, randperm), numpy and random."""
    batch = torch.from_numpy(np.random.standard_normal((16, 6)).astype(np.float32))
    batch = batch[torch.randperm(16)] * random.uniform(0.5, 1.5)
    loss = model(batch).pow(2).mean()
    optim.zero_grad()
    loss.backward()
    optim.step()
    return [loss.detach().clone(), torch.rand(3), np.random.random(), random.random()]


def run(model, optim, n):
    return [step(model, optim) for _ in range(n)]


def identical(a, b) -> bool:
    for x, y in zip(a, b, strict=True):
        for p, q in zip(x, y, strict=True):
            if isinstance(p, torch.Tensor):
                if not torch.equal(p, q):
                    return False
            elif p != q:
                return False
    return True


def seed_everything(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def test_resumed_run_is_bit_identical(tmp_path):
    seed_everything(0)
    model, optim = make(0)
    run(model, optim, 3)
    zipsave.save({"model": model, "optim": optim, "step": 3, "rng": zipsave.RNGState()}, tmp_path / "ckpt.zip")
    expected = run(model, optim, 5)

    seed_everything(123)  # a fresh process: other weights, other random streams
    model2, optim2 = make(1)
    app_state = {"model": model2, "optim": optim2, "step": 0, "rng": zipsave.RNGState()}
    zipsave.restore(app_state, tmp_path / "ckpt.zip", strict=True)
    assert app_state["step"] == 3
    assert identical(run(model2, optim2, 5), expected)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), model2.parameters()))


def test_without_rng_state_the_resumed_run_differs(tmp_path):
    seed_everything(0)
    model, optim = make(0)
    run(model, optim, 2)
    zipsave.save({"model": model, "optim": optim}, tmp_path / "ckpt.zip")
    expected = run(model, optim, 3)
    seed_everything(5)
    model2, optim2 = make(1)
    zipsave.restore({"model": model2, "optim": optim2}, tmp_path / "ckpt.zip", strict=True)
    assert not identical(run(model2, optim2, 3), expected)


def test_restore_is_in_place_without_copies(tmp_path):
    model, optim = make(0)
    run(model, optim, 2)
    zipsave.save({"model": model, "optim": optim, "step": 2}, tmp_path / "ckpt.zip")
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    saved_avg = [optim.state[p]["exp_avg"].clone() for p in model.parameters()]
    run(model, optim, 2)  # move on, then go back
    params = [p.data_ptr() for p in model.parameters()]
    moments = [optim.state[p]["exp_avg"].data_ptr() for p in model.parameters()]
    app_state = {"model": model, "optim": optim, "step": 0}

    zipsave.restore(app_state, tmp_path / "ckpt.zip", strict=True)

    assert app_state["model"] is model and app_state["optim"] is optim and app_state["step"] == 2
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
    assert all(torch.equal(optim.state[p]["exp_avg"], s) for p, s in zip(model.parameters(), saved_avg))
    assert [p.data_ptr() for p in model.parameters()] == params  # read straight into them
    assert [optim.state[p]["exp_avg"].data_ptr() for p in model.parameters()] == moments


def test_app_state_archive_layout_and_plain_load(tmp_path):
    model, optim = make(0)
    zipsave.save({"model": model, "optim": optim, "step": 10, "note": "warm-up"}, tmp_path / "ckpt.zip")
    loaded = zipsave.load(tmp_path / "ckpt.zip")  # no init.json: comes back as a dict
    assert loaded["step"] == 10 and loaded["note"] == "warm-up"
    assert set(loaded["model"]) == set(model.state_dict())
    assert set(loaded["optim"]) == {"state", "param_groups"}


def test_strict_restore_names_the_difference(tmp_path):
    model, optim = make(0)
    zipsave.save({"model": model, "optim": optim, "step": 1}, tmp_path / "ckpt.zip")
    with pytest.raises(
        zipsave.ParameterMismatchError,
        match=re.escape("holds stateful entries ['model', 'optim'], but the app state has ['model', 'optim', 'rng']"),
    ):
        zipsave.restore({"model": model, "optim": optim, "rng": zipsave.RNGState()}, tmp_path / "ckpt.zip", strict=True)
    # exact_match=False: what matches is restored, the rest is reported
    state = {"model": model, "rng": zipsave.RNGState()}
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("member `optim.pth`")):
        zipsave.restore(state, tmp_path / "ckpt.zip", exact_match=False)
    assert state["step"] == 1


def test_a_strict_restore_leaves_out_what_exclude_names_and_its_hint_works(tmp_path):
    """An evaluator restores the model alone: ``exclude=["optim"]`` is honoured by the strict
    check, and the hint of a mismatch names the call that then succeeds."""
    model, optim = make(0)
    zipsave.save({"model": model, "optim": optim, "step": 3}, tmp_path / "ckpt.zip")
    state = {"model": make(1)[0], "step": 0}
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape("Pass `exclude=['optim']`")):
        zipsave.restore(state, tmp_path / "ckpt.zip", strict=True)
    zipsave.restore(state, tmp_path / "ckpt.zip", strict=True, exclude=["optim"])
    assert state["step"] == 3
    assert all(torch.equal(a, b) for a, b in zip(state["model"].state_dict().values(), model.state_dict().values()))


@pytest.mark.parametrize(
    "make_generator",
    [
        lambda: torch.Generator().manual_seed(1),
        lambda: np.random.default_rng(2),
        lambda: np.random.Generator(np.random.MT19937(3)),
        lambda: np.random.RandomState(4),
        lambda: random.Random(5),
    ],
    ids=["torch", "numpy-pcg64", "numpy-mt19937", "numpy-randomstate", "python"],
)
def test_named_generators_are_restored_in_place(tmp_path, make_generator):
    gen = make_generator()
    draw = {
        torch.Generator: lambda g: torch.rand(4, generator=g).tolist(),
        np.random.Generator: lambda g: g.random(4).tolist(),
        np.random.RandomState: lambda g: g.random_sample(4).tolist(),
        random.Random: lambda g: [g.random() for _ in range(4)],
    }[
        next(
            t
            for t in (torch.Generator, np.random.Generator, np.random.RandomState, random.Random)
            if isinstance(gen, t)
        )
    ]
    draw(gen)
    zipsave.save({"rng": zipsave.RNGState(generators={"env": gen})}, tmp_path / "rng.zip")
    expected = draw(gen)
    draw(gen)
    zipsave.restore({"rng": zipsave.RNGState(generators={"env": gen})}, tmp_path / "rng.zip", strict=True)
    assert draw(gen) == expected


def test_rng_state_only_what_is_asked(tmp_path):
    seed_everything(0)
    zipsave.save({"rng": zipsave.RNGState(numpy=False, python=False)}, tmp_path / "rng.zip")
    saved = zipsave.load(tmp_path / "rng.zip")["rng"]
    assert "torch" in saved and "numpy" not in saved and "python" not in saved
    expected_torch = torch.rand(2)
    seed_everything(1)
    numpy_next = np.random.get_state()[1].copy()
    zipsave.restore({"rng": zipsave.RNGState()}, tmp_path / "rng.zip")
    assert torch.equal(torch.rand(2), expected_torch)
    assert np.array_equal(np.random.get_state()[1], numpy_next)  # numpy was not saved, so not touched


def test_rng_state_errors():
    with pytest.raises(TypeError, match=re.escape("generator `env` is a int; expected torch.Generator")):
        zipsave.RNGState(generators={"env": 3})
    rng = zipsave.RNGState(generators={"env": random.Random(0)})
    with pytest.raises(KeyError, match=re.escape("the saved RNG state has no generators ['env']; it has []")):
        rng.load_state_dict({"torch": torch.get_rng_state()})
    other = zipsave.RNGState(generators={"env": torch.Generator()}).state_dict()
    with pytest.raises(TypeError, match=re.escape("saved a torch generator state, but the generator is a Random")):
        rng.load_state_dict(other)
    assert repr(rng) == "RNGState(torch, cuda, numpy, python, env)"


def test_an_optimizer_saved_alone_is_refused_not_restored_over_the_weights(tmp_path):
    """Saved by its attributes, an optimizer's `param_groups` held the parameters themselves, and
    `restore` wrote their saved values into another model's weights and left `state_dict()`
    raising KeyError."""
    model, optim = make(0)
    with pytest.raises(
        zipsave.EncodeError,
        match=re.escape(
            "cannot save torch.optim.adam.Adam as the object of an archive: it is an optimizer or LR scheduler, "
            "whose attributes are references to live parameters; nothing was written. Save its state in a dict, "
            "with the model it optimizes: `zipsave.save({'policy': net, 'optimizer': optimizer}, path)`"
        ),
    ):
        zipsave.save(optim, tmp_path / "optim.zip")
    assert not (tmp_path / "optim.zip").exists()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (torch.ones(3), "torch.Tensor as the object of an archive: it is a tensor or array; nothing was written. "),
        (np.ones(3), "numpy.ndarray as the object of an archive: it is a tensor or array; nothing was written. "),
        (lambda: 1, "builtins.function as the object of an archive: it is a function or class"),
        (torch.nn.Linear, "builtins.type as the object of an archive: it is a function or class"),
    ],
    ids=["tensor", "array", "lambda", "class"],
)
def test_a_value_whose_attributes_are_not_its_state_is_refused(tmp_path, value, words):
    """A tensor saved alone (as with `torch.save`) was written as an archive without it."""
    with pytest.raises(zipsave.EncodeError, match=re.escape(f"cannot save {words}")):
        zipsave.save(value, tmp_path / "v.zip")
    assert not (tmp_path / "v.zip").exists()
    if isinstance(value, torch.Tensor):
        zipsave.save({"weights": value}, tmp_path / "v.zip")  # what the hint says
        assert torch.equal(zipsave.load(tmp_path / "v.zip")["weights"], value)


def test_an_environment_saved_alone_is_refused_with_envstate_named(tmp_path):
    gym = pytest.importorskip("gymnasium")
    with pytest.raises(zipsave.EncodeError, match=re.escape("`zipsave.save({'env': zipsave.EnvState(env)}, path)`")):
        zipsave.save(gym.make("CartPole-v1"), tmp_path / "env.zip")


def test_arguments_in_the_wrong_order_say_so(tmp_path):
    model, _ = make(0)
    with pytest.raises(zipsave.EncodeError, match=re.escape("The object comes first: `zipsave.save(model, path)`.")):
        zipsave.save(str(tmp_path / "m.zip"), model)
    zipsave.save({"model": model}, tmp_path / "m.zip")
    with pytest.raises(TypeError, match=re.escape("call `zipsave.restore(obj, path)`")):
        zipsave.restore(str(tmp_path / "m.zip"), {"model": model})


class Holder:
    def __init__(self):
        self.net = torch.nn.Linear(2, 2)
        self.log_alpha = torch.nn.Parameter(torch.full((1,), 0.5))
        self.count = 3


def test_load_without_a_class_returns_the_loose_tensors_too(tmp_path):
    """`zipsave.load(path)` of a module or plain object saved alone left out its
    `pytorch_variables.pth`: a Linear came back as {'in_features': 2, 'out_features': 2}."""
    linear = torch.nn.Linear(2, 2)
    zipsave.save(linear, tmp_path / "linear.zip")
    loaded = zipsave.load(tmp_path / "linear.zip")
    assert sorted(loaded) == ["bias", "in_features", "out_features", "weight"]
    assert torch.equal(loaded["weight"], linear.weight) and torch.equal(loaded["bias"], linear.bias)

    holder = Holder()
    zipsave.save({"holder": holder, "step": 1}, tmp_path / "app.zip")
    loaded = zipsave.load(tmp_path / "app.zip")
    assert sorted(loaded["holder"]) == ["count", "log_alpha", "net"]
    assert torch.equal(loaded["holder"]["log_alpha"], holder.log_alpha)
    assert "log_alpha" not in zipsave.load(tmp_path / "app.zip", exclude=["holder/log_alpha"])["holder"]


# -- the manifest's list of folders saved as app state ------------------------------------------


class _ClaimsEverything(zipsave._registry.Handler):
    """A plug-in that recognises every folder and restores into every object, and says so."""

    name = "test-claims-everything"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def recognises(self, session, folder):
        self.asked.append(f"recognises {folder!r}")
        return True

    def build(self, session, folder, **kwargs):
        return "built by the plug-in"

    def restores(self, obj):
        self.asked.append("restores")
        return True

    def restore(self, session, obj, folder, **kwargs):
        self.asked.append(f"restore into {type(obj).__name__}")


@pytest.fixture
def plugin():
    handler = _ClaimsEverything()
    zipsave._registry.register(handler)
    try:
        yield handler
    finally:
        zipsave._registry.unregister(handler.name)


def _manifest(path) -> dict:
    import json
    import zipfile

    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("manifest.json"))


def _rewrite_manifest(path, out, change) -> None:
    import json
    import zipfile

    manifest = _manifest(path)
    change(manifest)
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            raw = json.dumps(manifest).encode() if info.filename == "manifest.json" else src.read(info)
            dst.writestr(info.filename, raw)


def test_a_dict_is_listed_as_app_state_and_loads_as_one_without_asking_handlers(tmp_path, plugin):
    model, optim = make(0)
    path = tmp_path / "app.zip"
    zipsave.save({"model": model, "optim": optim, "step": 3}, path)
    assert _manifest(path)["app_state"] == [""]
    loaded = zipsave.load(path)
    assert loaded["step"] == 3 and set(loaded) == {"model", "optim", "step"}
    data, params, _ = zipsave.load_archive(path)
    assert data == {"step": 3} and set(params) == {"model", "optim"}
    assert zipsave.inspect(path).members
    live = {"model": make(1)[0], "optim": make(1)[1]}
    zipsave.restore(live, path)
    assert torch.equal(live["model"][0].weight, model[0].weight)
    assert plugin.asked == []


@pytest.mark.parametrize(
    "change",
    [lambda m: m.pop("app_state"), lambda m: m.update(app_state=""), lambda m: m.update(app_state=[1])],
    ids=["absent (zipsave 0.2)", "not a list", "not names"],
)
def test_without_a_well_formed_list_handlers_are_asked_as_before(tmp_path, plugin, change):
    model, optim = make(0)
    zipsave.save({"model": model, "optim": optim}, tmp_path / "app.zip")
    _rewrite_manifest(tmp_path / "app.zip", tmp_path / "old.zip", change)
    assert zipsave.load(tmp_path / "old.zip") == "built by the plug-in"
    assert set(plugin.asked) == {"recognises ''"}


def test_objects_and_save_archive_are_not_listed_as_app_state(tmp_path):
    model, optim = make(0)
    zipsave.save_archive(tmp_path / "parts.zip", data={"gamma": 0.9}, params={"model": model.state_dict()})
    assert "app_state" not in _manifest(tmp_path / "parts.zip")

    class Agent(zipsave.Saveable):
        def __init__(self):
            self.model, self.optim = make(0)

    Agent().save(tmp_path / "agent.zip")
    assert "app_state" not in _manifest(tmp_path / "agent.zip")
    zipsave.save({"agent": Agent(), "step": 1}, tmp_path / "nested.zip")
    assert _manifest(tmp_path / "nested.zip")["app_state"] == [""]  # the component folder is the Agent's


def test_restore_into_a_live_object_other_than_a_dict_still_asks_handlers(tmp_path, plugin):
    model, optim = make(0)
    zipsave.save({"model": model, "optim": optim}, tmp_path / "app.zip")

    class Holder(dict):  # a dict subclass is app state too: the core fills it
        pass

    zipsave.restore(Holder(model=make(1)[0], optim=make(1)[1]), tmp_path / "app.zip")
    assert plugin.asked == []

    class Agent:
        def __init__(self):
            self.model, self.optim = make(1)

    zipsave.restore(Agent(), tmp_path / "app.zip")
    assert plugin.asked == ["restores", "restore into Agent"]
