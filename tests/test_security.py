"""Loading runs no code from the archive: native forms need no pickle at all, pickled entries
go through the allowlist, init.json builds only Saveable classes, and every refusal names the
key, the global and the three ways to opt in. Each malicious payload is also shown to be live
(it does run under allow_pickle=True), so its absence under the default means something."""

from __future__ import annotations

import collections
import datetime
import enum
import io
import os
import pathlib
import pickle
import re
import subprocess
import sys
import warnings
import zipfile

import cloudpickle
import gymnasium as gym
import numpy as np
import orjson
import pytest
import torch
from models import Algo, same_state

import zipsave
import zipsave._registry
from zipsave._codec import _decode as _codec
from zipsave._trust import _unpickler as _unpickle

# The key a message names is the one its `custom_objects=` fix names, ready to copy.
OPT_INS = ("`custom_objects={%r: ...}`", "`allow_pickle=True`")


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


Transition = collections.namedtuple("Transition", "obs action reward")


class _Reduce:
    """Pickles as ``func(*args)``, the shape of every malicious pickle. Building one runs nothing."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _nested_call(outer, inner, *args):
    """``outer(inner)(*args)`` as a pickle: a callable computed by the payload itself."""

    class _Call(_Reduce):
        def __call__(self, *a):  # pickle insists that a REDUCE target looks callable
            raise AssertionError

    return _Reduce(_Call(outer, *inner), *args)


def payloads(marker: pathlib.Path) -> dict[str, tuple[object, str]]:
    """Each payload, if ever unpickled, creates ``marker``; with the global it needs."""
    cmd = f"touch {marker}"
    return {
        "os.system": (_Reduce(os.system, cmd), "posix.system"),
        "subprocess.check_call": (_Reduce(subprocess.check_call, ["touch", str(marker)]), "subprocess.check_call"),
        "eval": (_Reduce(eval, f"__import__('os').system({cmd!r})"), "builtins.eval"),
        "exec": (_Reduce(exec, f"import os; os.system({cmd!r})"), "builtins.exec"),
        # builtins.getattr is answered by a guarded stand-in: the chain stops at __import__.
        "getattr-chain": (_nested_call(getattr, (_Reduce(__import__, "os"), "system"), cmd), "builtins.__import__"),
        "file-write": (_Reduce(pathlib.Path.write_text, marker, "pwned"), f"{pathlib.Path.__module__}.Path.write_text"),
        "inside-a-list": ([1, 2, _Reduce(os.system, cmd)], "posix.system"),
    }


def _rewrite(path, member, transform):
    with zipfile.ZipFile(path) as zf:
        items = [(info, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(path, "w") as zf:
        for info, raw in items:
            zf.writestr(info, transform(raw) if info.filename == member else raw)


# -- native forms need no pickle -------------------------------------------------------------
@pytest.fixture
def pickle_impossible(monkeypatch):
    """Every way the data codec could unpickle raises. (.pth members are read by zipsave's
    metadata reader and torch's weights-only loader, which do not go through these.)"""

    def refuse(*args, **kwargs):
        raise AssertionError("something tried to unpickle")

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # torch imports its lazy modules now
    zipsave._registry.handlers()  # and zipsave its integrations, whose classes subclass pickle's
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(cloudpickle, "loads", refuse)
    monkeypatch.setattr(_unpickle, "restricted_loads", refuse)
    monkeypatch.setattr(_codec, "restricted_loads", refuse)


def native_model() -> Algo:
    algo = Algo().train_step(2)
    algo.schedule_points = (0.0, 0.5, 1.0)
    algo.seen_actions = {0, 1}
    algo.counts = {0: 10, 1: 12}
    algo.stats = collections.OrderedDict(mean=np.float32(0.5), std=np.float64(0.1))
    algo.history = collections.deque([np.arange(3)], maxlen=4)
    algo.buffer = np.random.default_rng(0).standard_normal((500, 40)).astype(np.float32)  # an .npy member
    algo.ent_coef_tensor = torch.tensor([0.1, 0.2])
    algo.obs_dtype = np.dtype("float32")
    algo.torch_dtype = torch.bfloat16
    algo.device = torch.device("cpu")
    algo.complex_gain = 1 + 0.5j
    algo.best = float("-inf")
    algo.huge = 2**80
    algo.tag = b"\x00v1"
    algo.started = datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.timezone.utc)  # noqa: UP017 - 3.10
    algo.elapsed = datetime.timedelta(minutes=3)
    algo.log_dir = pathlib.Path("runs/1")
    algo.mode = Mode.TRAIN
    algo.last = Transition(np.zeros(4, np.float32), 1, 0.5)
    algo.activation_fn = torch.nn.ReLU
    algo.optimizer_class = torch.optim.Adam
    algo.spaces = {
        "text": gym.spaces.Text(4),
        "graph": gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(3)),
        "seq": gym.spaces.Sequence(gym.spaces.Discrete(2)),
        # gymnasium 0.29 has no OneOf (tests/test_spaces.py checks what loading one does there)
        **(
            {"oneof": gym.spaces.OneOf([gym.spaces.Discrete(2), gym.spaces.MultiBinary(3)])}
            if hasattr(gym.spaces, "OneOf")
            else {}
        ),
        "tuple": gym.spaces.Tuple([gym.spaces.MultiDiscrete([2, 3]), gym.spaces.Dict({"a": gym.spaces.Discrete(4)})]),
    }
    return algo


NATIVE_ATTRS = [
    "schedule_points",
    "seen_actions",
    "counts",
    "stats",
    "history",
    "buffer",
    "ent_coef_tensor",
    "obs_dtype",
    "torch_dtype",
    "device",
    "complex_gain",
    "best",
    "huge",
    "tag",
    "started",
    "elapsed",
    "log_dir",
    "mode",
    "last",
    "activation_fn",
    "optimizer_class",
    "spaces",
    "observation_space",
    "action_space",
    "ep_info_buffer",
    "net_arch",
    "learning_rate",
    "num_timesteps",
    "_last_obs",
]


def test_native_model_loads_fully_with_pickle_impossible(tmp_path, request):
    algo = native_model()
    algo.save(tmp_path / "a.zip")
    request.getfixturevalue("pickle_impossible")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = zipsave.load(tmp_path / "a.zip", trusted=[f"{__name__}."])
    assert loaded.zipsave_report.ok
    assert same_state(algo.policy, loaded.policy) and same_state(algo.policy.optimizer, loaded.policy.optimizer)
    for name in NATIVE_ATTRS:
        want, got = getattr(algo, name), getattr(loaded, name)
        assert type(want) is type(got), name
        if isinstance(want, np.ndarray):
            np.testing.assert_array_equal(want, got)
        elif isinstance(want, torch.Tensor):
            assert torch.equal(want, got), name
        elif name == "history":
            assert len(got) == 1 and got.maxlen == 4 and np.array_equal(got[0], want[0])
        elif name == "last":
            assert np.array_equal(got.obs, want.obs) and got[1:] == want[1:]
        else:
            assert want == got, name
    # The large array left the JSON for an arrays/*.npy member.
    with zipfile.ZipFile(tmp_path / "a.zip") as zf:
        assert "arrays/0.npy" in zf.namelist()
        data = orjson.loads(zf.read("data"))
    assert ":serialized:" not in data["buffer"]
    # Every entry carries a native form: none needs its pickle.
    for key, value in data.items():
        if isinstance(value, dict) and ":type:" in value:
            assert ":zipsave:" in value, key


def test_native_model_loads_in_a_fresh_interpreter_with_pickle_disabled(tmp_path):
    native_model().save(tmp_path / "a.zip")
    code = f"""
import pickle, sys
import cloudpickle
import torch
torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # torch imports its lazy modules now
def refuse(*a, **k):
    raise SystemExit("something tried to unpickle")
pickle.loads = pickle.load = cloudpickle.loads = refuse
import zipsave, zipsave._trust._unpickler, zipsave._codec._decode
zipsave._trust._unpickler.restricted_loads = zipsave._codec._decode.restricted_loads = refuse
import warnings
warnings.simplefilter("error")
m = zipsave.load({str(tmp_path / "a.zip")!r}, trusted=["test_security.", "models.Algo"])  # init.json names models.Algo
print(m.zipsave_report.ok, m.mode, type(m.spaces["graph"]).__name__, m.buffer.shape)
"""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(pathlib.Path(__file__).parent), str(pathlib.Path(__file__).parents[1])]),
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "Mode.TRAIN", "Graph", "(500,", "40)"]


# -- malicious pickles -----------------------------------------------------------------------
@pytest.mark.skipif(sys.platform == "win32", reason="payloads use `touch`")
@pytest.mark.parametrize("case", list(payloads(pathlib.Path("x"))))
def test_malicious_pickle_is_skipped_and_never_runs(tmp_path, case):
    marker = tmp_path / "PWNED"
    payload, refused = payloads(marker)[case]
    zipsave.save({"learning_rate": 0.1, "evil": payload}, tmp_path / "a.zip")
    assert not marker.exists()  # saving never runs it

    report = zipsave.LoadReport()
    with pytest.warns(zipsave.SkippedEntryWarning) as caught:
        loaded = zipsave.load(tmp_path / "a.zip", report=report)
    assert not marker.exists(), "the payload ran"
    assert loaded == {"learning_rate": 0.1}
    (warning,) = caught
    text = str(warning.message)
    assert "skipped key `evil` of member `data`" in text
    assert f"refusing to import untrusted global `{refused}`." in text
    for opt_in in OPT_INS:
        assert opt_in.replace("%r", repr("evil")) in text
    assert [(e.key, e.member) for e in report.skipped] == [("evil", "data")]

    # strict=True: an error, still before anything runs
    with pytest.raises(zipsave.UnsafeGlobalError, match=re.escape(f"refusing to import untrusted global `{refused}`.")):
        zipsave.load(tmp_path / "a.zip", strict=True)
    assert not marker.exists()

    # custom_objects: the entry is never decoded at all
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert zipsave.load(tmp_path / "a.zip", custom_objects={"evil": None})["evil"] is None
    assert not marker.exists()

    # The payload is live: trusting the archive completely runs it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. the ResourceWarning of a Popen object
        zipsave.load(tmp_path / "a.zip", allow_pickle=True)
    assert marker.exists(), "the payload was not a real one"


class UserThing:
    """A harmless module-level class the allowlist does not know."""

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return type(other) is UserThing and other.value == self.value


def test_refused_ordinary_class_names_all_three_ways_to_opt_in(tmp_path):
    zipsave.save({"thing": UserThing(3)}, tmp_path / "a.zip")
    with pytest.warns(zipsave.SkippedEntryWarning) as caught:
        zipsave.load(tmp_path / "a.zip")
    text = str(caught[0].message)
    assert f"refusing to import untrusted global `{__name__}.UserThing`." in text
    assert f"`trusted=['{__name__}.UserThing']`" in text
    for opt_in in OPT_INS:
        assert opt_in.replace("%r", repr("thing")) in text
    assert zipsave.load(tmp_path / "a.zip", trusted=[UserThing])["thing"] == UserThing(3)


def test_trusting_something_else_does_not_trust_the_payload(tmp_path):
    marker = tmp_path / "PWNED"
    zipsave.save({"evil": payloads(marker)["os.system"][0]}, tmp_path / "a.zip")
    with pytest.warns(
        zipsave.SkippedEntryWarning, match=re.escape("refusing to import untrusted global `posix.system`.")
    ):
        zipsave.load(tmp_path / "a.zip", trusted=["os.path.join", f"{__name__}."])
    assert not marker.exists()


# -- references by import path ---------------------------------------------------------------
def _native_entry(body):
    return {":type:": "<class 'builtin_function_or_method'>", ":zipsave:": body}


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        ({"kind": "ref", "path": "os:system"}, "os.system"),
        ({"kind": "ref", "path": "builtins:eval"}, "builtins.eval"),
        ({"kind": "ref", "path": "builtins:exec"}, "builtins.exec"),
        ({"kind": "ref", "path": "subprocess:Popen"}, "subprocess.Popen"),
        ({"kind": "ref", "path": "builtins:__import__"}, "builtins.__import__"),
        ({"kind": "ref", "path": "torch.nn.modules.activation:os.system"}, "torch.nn.modules.activation.os.system"),
        ({"kind": "enum", "class": "os:system", "name": "x", "value": "touch PWNED"}, "os.system"),
        ({"kind": "namedtuple", "class": "builtins:eval", "items": ["1"]}, "builtins.eval"),
        ({"kind": "defaultdict", "factory": "builtins:eval", "items": []}, "builtins.eval"),
    ],
)
def test_dangerous_references_are_refused_by_default(tmp_path, body, refused):
    zipsave.save({"lr": 0.1}, tmp_path / "a.zip")

    def inject(raw):
        data = orjson.loads(raw)
        data["evil"] = _native_entry(body)
        return orjson.dumps(data)

    _rewrite(tmp_path / "a.zip", "data", inject)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = zipsave.load(tmp_path / "a.zip")
    skips = [w for w in caught if issubclass(w.category, zipsave.SkippedEntryWarning)]
    assert len(skips) == 1
    assert f"refusing to import untrusted global `{refused}`." in str(skips[0].message)
    assert loaded == {"lr": 0.1}


def test_a_trusted_callable_is_still_never_called_as_an_enum_or_namedtuple(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    zipsave.save({"lr": 0.1}, tmp_path / "a.zip")

    def inject(raw):
        data = orjson.loads(raw)
        data["e"] = _native_entry({"kind": "enum", "class": "os:system", "name": "x", "value": "touch PWNED"})
        data["n"] = _native_entry({"kind": "namedtuple", "class": "os:system", "items": ["touch PWNED"]})
        return orjson.dumps(data)

    _rewrite(tmp_path / "a.zip", "data", inject)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = zipsave.load(tmp_path / "a.zip", trusted=["os.system"])
    messages = " ".join(str(w.message) for w in caught)
    assert "`os:system` is not an Enum class." in messages
    assert "`os:system` is not a namedtuple class." in messages
    assert loaded == {"lr": 0.1}
    assert not (tmp_path / "PWNED").exists()


# -- init.json is a door too -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "args"),
    [
        ("os:system", {"command": "touch PWNED"}),
        ("subprocess:Popen", {"args": ["touch", "PWNED"]}),
        ("builtins:eval", {"source": "__import__('os').system('touch PWNED')"}),
        ("collections:OrderedDict", {}),
        ("models:same_state", {}),
    ],
)
def test_init_json_builds_only_saveable_classes(tmp_path, monkeypatch, path, args):
    monkeypatch.chdir(tmp_path)
    Algo().save(tmp_path / "a.zip")
    _rewrite(tmp_path / "a.zip", "init.json", lambda raw: orjson.dumps({"class": path, "args": args}))
    dotted = path.replace(":", ".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zipsave.ZipsaveWarning)  # init.json was edited: noted, allowed
        with pytest.raises(
            zipsave.UnsafeGlobalError,
            match=re.escape(
                f"member `init.json`: refusing to import untrusted global `{dotted}`. Only zipsave.Saveable subclasses "
                "are built from init.json; pass `cls=` to choose the class yourself."
            ),
        ):
            zipsave.load(tmp_path / "a.zip", trusted=[dotted])
    assert not (tmp_path / "PWNED").exists()
    if not args:  # naming the class yourself is the way out
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", zipsave.ZipsaveWarning)
            assert isinstance(zipsave.load(tmp_path / "a.zip", cls=Algo), Algo)


def test_init_json_saveable_class_is_built(tmp_path):
    Algo(learning_rate=0.01).save(tmp_path / "a.zip")
    loaded = zipsave.load(tmp_path / "a.zip")
    assert type(loaded) is Algo and loaded.learning_rate == 0.01


# -- the allowlist lets ordinary SB3-style pickles through -----------------------------------
def test_allowlisted_pickles_load_by_default(tmp_path):
    entries = {
        "observation_space": gym.spaces.Box(-1, 1, (3,), np.float32),
        "lr_schedule_points": collections.OrderedDict(a=np.arange(3)),
        "activation_fn": torch.nn.Tanh,
    }

    def inject(raw):
        data = orjson.loads(raw)
        for key, value in entries.items():
            data[key] = {
                ":type:": str(type(value)),
                ":serialized:": __import__("base64").b64encode(cloudpickle.dumps(value)).decode(),
            }
        return orjson.dumps(data)

    zipsave.save({"lr": 0.1}, tmp_path / "a.zip")
    _rewrite(tmp_path / "a.zip", "data", inject)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zipsave.ZipsaveWarning)  # data edited: noted
        warnings.simplefilter("error", zipsave.SkippedEntryWarning)
        loaded = zipsave.load(tmp_path / "a.zip")
    assert loaded["observation_space"] == entries["observation_space"]
    assert loaded["activation_fn"] is torch.nn.Tanh
    np.testing.assert_array_equal(loaded["lr_schedule_points"]["a"], np.arange(3))


def test_torch_load_runs_weights_only(tmp_path, monkeypatch):
    """A .pth member whose pickle names a foreign global is refused by torch's weights-only
    loader (or zipsave's metadata reader), never executed."""
    marker = tmp_path / "PWNED"
    buf = io.BytesIO()
    torch.save({"w": torch.ones(1), "evil": _Reduce(os.system, f"touch {marker}")}, buf)
    zipsave.save({"lr": 0.1}, tmp_path / "a.zip")
    _rewrite(tmp_path / "a.zip", "pytorch_variables.pth", lambda raw: buf.getvalue())
    with pytest.raises(zipsave.IntegrityError, match=re.escape("member `pytorch_variables.pth`")):
        zipsave.load_archive(tmp_path / "a.zip")  # a tensor member that fails its checks: never a wrong model
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("member `pytorch_variables.pth`")):
        zipsave.load_archive(tmp_path / "a.zip", skip_broken_tensors=True, verify=False)
    assert not marker.exists()
