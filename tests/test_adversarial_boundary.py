"""The error-boundary family (``tests/adversarial/boundaries.py``): every exception type at every
public door, and the real hostile inputs that once escaped as a builtin.

What must hold: a door that reads untrusted bytes raises a ``ZipsaveError`` naming the file,
with the original exception in its cause chain; the command line exits 2 and never calls a
hostile input a zipsave bug; ``MemoryError`` and ``KeyboardInterrupt`` pass as they are; a
caller's own mistake (a path of the wrong type) is not dressed up as the archive's.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import re
import sys
import warnings
import zipfile

import pytest
import torch

import zipsave
from zipsave import cli
from zipsave._archive import ArchiveReader
from zipsave._tools import diff, extract, verify

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from adversarial import boundaries  # noqa: E402


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = cli.main(argv)
    return code, err.getvalue()


def _assert_refused(excinfo: pytest.ExceptionInfo, path: str, cause: type | None = None) -> None:
    err = excinfo.value
    assert isinstance(err, zipsave.ZipsaveError), f"{type(err).__name__}: {err}"
    assert str(path) in str(err), str(err)
    if cause is not None:
        chain = boundaries.cause_chain(err)
        assert any(type(e) is cause for e in chain), [type(e).__name__ for e in chain]
        assert err.__cause__ is not None or err.__context__ is not None


# -- the fault-injection generator -------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("boundary")
    net = torch.nn.Linear(2, 2)
    zipsave.save({"net": net, "lr": 0.5}, root / "a.zip")
    zipsave.save({"net": torch.nn.Linear(2, 2), "lr": 0.25}, root / "b.zip")
    directory = root / "ckpt"
    with zipsave.CheckpointManager(directory, keep_last=2) as manager:
        manager.save(1, {"net": net, "lr": 0.5}, metrics={"r": 1.0})
    return {
        "archive": str(root / "a.zip"),
        "other": str(root / "b.zip"),
        "root": str(root),
        "directory": str(directory),
    }


def _doors(files: dict[str, str]) -> dict[str, object]:
    archive = files["archive"]
    out = os.path.join(files["root"], "out")
    return {
        "load": lambda: zipsave.load(archive),
        "load_archive": lambda: zipsave.load_archive(archive),
        "read": lambda: zipsave.read(archive, "net/weight"),
        "restore": lambda: zipsave.restore({"net": torch.nn.Linear(2, 2), "lr": 0.0}, archive),
        "inspect": lambda: zipsave.inspect(archive, verify=True),
        "verify": lambda: verify(archive),
        "diff": lambda: diff(archive, files["other"]),
        "extract": lambda: extract(archive, out, overwrite=True),
        "manager_load_latest": lambda: zipsave.CheckpointManager(files["directory"], read_only=True).load_best("r"),
        "dcp_load": lambda: __import__("zipsave.dcp", fromlist=["load"]).load({"lr": 0.0}, archive),
    }


DOOR_NAMES = [
    "load",
    "load_archive",
    "read",
    "restore",
    "inspect",
    "verify",
    "diff",
    "extract",
    "manager_load_latest",
    "dcp_load",
]


def _inject(monkeypatch, make) -> None:
    for name in boundaries.READER_METHODS:

        def failing(self, *args, _make=make, **kwargs):
            raise _make()

        monkeypatch.setattr(ArchiveReader, name, failing)


@pytest.mark.parametrize("door", DOOR_NAMES)
@pytest.mark.parametrize("raised", list(boundaries.RAISED))
def test_every_exception_at_every_door_is_a_zipsave_error(door, raised, files, monkeypatch):
    make = boundaries.RAISED[raised]
    _inject(monkeypatch, make)
    call = _doors(files)[door]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as excinfo:
            call()
    where = files["directory"] if door.startswith("manager") else files["archive"]
    if door == "diff" and files["archive"] not in str(excinfo.value):
        where = files["other"]
    _assert_refused(excinfo, where if door != "manager_load_latest" else "step-0000000001.zip", type(make()))


@pytest.mark.parametrize("raised", ["RecursionError", "OverflowError", "AssertionError", "BadZipFile"])
@pytest.mark.parametrize(
    "command",
    [
        ("inspect", "{archive}"),
        ("verify", "{archive}"),
        ("diff", "{archive}", "{other}"),
        ("extract", "--overwrite", "{archive}", "{root}/cli-out"),
    ],
)
def test_the_command_line_never_calls_a_hostile_input_a_bug(command, raised, files, monkeypatch):
    _inject(monkeypatch, boundaries.RAISED[raised])
    code, err = _run([part.format(**files) for part in command])
    assert code == 2, err
    assert "please report" not in err, err
    assert files["archive"] in err, err


@pytest.mark.parametrize("passing", [MemoryError, KeyboardInterrupt])
def test_memory_errors_and_interrupts_pass_as_they_are(passing, files, monkeypatch):
    _inject(monkeypatch, passing)
    with pytest.raises(passing):
        zipsave.load(files["archive"])


def test_a_callers_own_mistake_stays_the_callers(files):
    with pytest.raises(TypeError, match=r"path must be a file path \(str or os.PathLike\), .*got int 12345"):
        zipsave.load(12345)
    with pytest.raises(FileNotFoundError):
        zipsave.load(os.path.join(files["root"], "missing.zip"))


def test_a_zipsave_error_without_an_archive_is_given_one(files, monkeypatch):
    def failing(self, *args, **kwargs):
        raise zipsave.DecodeError("no archive named here.")

    monkeypatch.setattr(ArchiveReader, "read", failing)
    with pytest.raises(zipsave.DecodeError, match=r"^archive `") as excinfo:
        zipsave.load_archive(files["archive"])
    assert excinfo.value.archive == files["archive"]


# -- the checkpoint index ------------------------------------------------------------------------
def _index_doors(directory: str) -> dict[str, object]:
    return {
        "manager": lambda: zipsave.CheckpointManager(directory, keep_last=2).close(),
        "read_only": lambda: zipsave.CheckpointManager(directory, read_only=True).list(),
    }


@pytest.mark.parametrize("door", ["manager", "read_only", "cli_list"])
@pytest.mark.parametrize("entry", ["nested_100000", *boundaries.INDEX_ENTRIES])
def test_a_hostile_checkpoint_index_is_a_checkpoint_directory_error(door, entry, tmp_path):
    directory = tmp_path / "ckpt"
    directory.mkdir()
    if entry == "nested_100000":
        boundaries.nested_index(str(directory))
    else:
        boundaries.index_with(str(directory), **boundaries.INDEX_ENTRIES[entry])
    (directory / "step-0000000001.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    if door == "cli_list":
        code, err = _run(["list", str(directory)])
        assert code == 2, err
        assert "please report" not in err and "zipsave-checkpoints.json" in err, err
        return
    with pytest.raises(
        zipsave.CheckpointDirectoryError, match=re.escape("index `zipsave-checkpoints.json`")
    ) as excinfo:
        _index_doors(str(directory))[door]()
    assert excinfo.value.__cause__ is not None
    assert str(directory) in str(excinfo.value)


def test_the_index_still_reads_what_a_manager_writes(files):
    listed = zipsave.CheckpointManager(files["directory"], read_only=True).list()
    assert [c.step for c in listed] == [1]
    assert listed[0].metrics == {"r": 1.0}


# -- extract -------------------------------------------------------------------------------------
@pytest.mark.parametrize("tree", list(boundaries.EXTRACT_TREES))
def test_extract_refuses_what_it_cannot_write_before_writing(tree, tmp_path):
    archive = boundaries.zip_of(str(tmp_path / "t.zip"), boundaries.EXTRACT_TREES[tree])
    out = tmp_path / "out"
    with pytest.raises(zipsave.ArchiveFormatError) as excinfo:
        extract(archive, out)
    assert archive in str(excinfo.value)
    assert "\x1b" not in str(excinfo.value)
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*")), "wrote before refusing"
    code, err = _run(["extract", archive, str(tmp_path / "cli-out")])
    assert code == 2 and "please report" not in err, err


def test_extract_names_the_member_a_file_system_refuses(tmp_path, monkeypatch):
    archive = boundaries.zip_of(str(tmp_path / "t.zip"), ["a/b", "c"])

    def refusing(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "open", refusing)
    with pytest.raises(
        zipsave.StorageError, match=re.escape("member `a/b`: could not be extracted (OSError: [Errno 28]")
    ) as excinfo:
        extract(archive, tmp_path / "out")
    assert excinfo.value.errno == 28


# -- SB3's doors under install() -----------------------------------------------------------------
sb3 = pytest.importorskip("stable_baselines3")


@pytest.fixture(scope="module")
def sb3_files(tmp_path_factory) -> dict[str, str]:
    import zipsave.sb3

    root = tmp_path_factory.mktemp("sb3-boundary")
    with zipsave.sb3.installed():
        small = sb3.PPO(
            "MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu", policy_kwargs={"net_arch": [8]}
        )
        model = sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
        model.save(root / "ppo.zip")
        small.save(root / "small.zip")
    data, params, variables = zipsave.load_archive(root / "ppo.zip", load_data=False)
    _, small_params, _ = zipsave.load_archive(root / "small.zip", load_data=False)
    with zipfile.ZipFile(root / "ppo.zip") as zf:
        raw_data = zf.read("data")
    out = {"ppo": str(root / "ppo.zip"), "root": str(root)}
    policy = params["policy"]
    first = next(iter(policy))
    shapes = {
        "wrong_shape": {**params, "policy": small_params["policy"]},
        "extra_tensor": {**params, "policy": {**policy, "extra.weight": torch.zeros(3)}},
        "missing_tensor": {**params, "policy": {k: v for k, v in policy.items() if k != first}},
    }
    for name, changed in shapes.items():
        path = root / f"{name}.zip"
        zipsave.save_archive(path, data={}, params=changed, pytorch_variables=variables)
        with zipfile.ZipFile(path) as zf:  # the model's own `data` back, so Algo.load can build it
            members = {n: zf.read(n) for n in zf.namelist() if n not in ("data", "manifest.json")}
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("data", raw_data)
            for n, raw in members.items():
                zf.writestr(n, raw)
        out[name] = str(path)
    return out


@pytest.mark.parametrize("case", ["wrong_shape", "extra_tensor", "missing_tensor"])
def test_set_parameters_and_load_agree_on_a_tensor_that_does_not_fit(case, sb3_files):
    import zipsave.sb3

    path = sb3_files[case]
    with zipsave.sb3.installed(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
        with pytest.raises(zipsave.ParameterMismatchError) as by_set:
            model.set_parameters(path, device="cpu")
        with pytest.raises(zipsave.ParameterMismatchError) as by_load:
            sb3.PPO.load(path, device="cpu")
    with pytest.raises(zipsave.ParameterMismatchError) as by_zipsave:
        zipsave.load(path, cls=sb3.PPO, device="cpu")
    for excinfo in (by_set, by_load, by_zipsave):
        _assert_refused(excinfo, path)
        assert excinfo.value.member == "policy.pth"
    # one rebuild path: the same mistake gets the same message through every door
    assert str(by_set.value) == str(by_load.value) == str(by_zipsave.value)


def test_set_parameters_from_a_dict_stays_sb3s(sb3_files):
    import zipsave.sb3

    with zipsave.sb3.installed():
        model = sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
        with pytest.raises(RuntimeError, match="Missing key") as excinfo:  # torch's, as SB3 raises it
            model.set_parameters({"policy": {}}, exact_match=True)
        assert not isinstance(excinfo.value, zipsave.ZipsaveError)
        model.set_parameters(sb3_files["ppo"], device="cpu")  # the file it wrote still loads


@pytest.mark.parametrize("payload", list(boundaries.BUFFER_PICKLES))
def test_load_replay_buffer_refuses_a_pickle_that_is_no_buffer(payload, tmp_path):
    import zipsave.sb3

    path = tmp_path / "buffer.pkl"
    path.write_bytes(boundaries.BUFFER_PICKLES[payload]())
    with zipsave.sb3.installed():
        model = sb3.DQN("MlpPolicy", "CartPole-v1", buffer_size=64, learning_starts=0, device="cpu")
        with pytest.raises(zipsave.ZipsaveError) as excinfo:
            model.load_replay_buffer(path)
    _assert_refused(excinfo, str(path))


@pytest.mark.parametrize("payload", list(boundaries.POLICY_FILES))
def test_policy_load_refuses_a_file_that_is_no_policy(payload, tmp_path):
    from stable_baselines3.common.policies import ActorCriticPolicy

    import zipsave.sb3

    path = tmp_path / "policy.pth"
    path.write_bytes(boundaries.POLICY_FILES[payload]())
    with zipsave.sb3.installed():
        with pytest.raises(zipsave.ZipsaveError) as excinfo:
            ActorCriticPolicy.load(path, device="cpu")
    _assert_refused(excinfo, str(path))


@pytest.mark.parametrize("count", [10**400, float("nan"), float("inf"), -1.0, "many"], ids=repr)
def test_vec_normalize_load_refuses_a_count_that_is_no_count(count, tmp_path):
    import base64
    import pickle

    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.running_mean_std import RunningMeanStd
    from stable_baselines3.common.vec_env import VecNormalize

    import zipsave.sb3

    path = tmp_path / "vec_normalize.pkl"
    with zipsave.sb3.installed():
        VecNormalize(make_vec_env("CartPole-v1", n_envs=1)).save(path)
        with zipfile.ZipFile(path) as zf:
            members = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
        data = json.loads(members["data"])
        stats = RunningMeanStd(shape=(4,))
        stats.count = count
        data["obs_rms"][":serialized:"] = base64.b64encode(pickle.dumps(stats)).decode()
        data["obs_rms"].pop(":zipsave:", None)
        members["data"] = json.dumps(data).encode()
        with zipfile.ZipFile(path, "w") as zf:
            for name, raw in members.items():
                zf.writestr(name, raw)
        with pytest.raises(zipsave.DecodeError, match=re.escape("`obs_rms.count` is")) as excinfo:
            VecNormalize.load(str(path), make_vec_env("CartPole-v1", n_envs=1))
    _assert_refused(excinfo, str(path))


# -- RLlib's doors, without Ray: the checks that run before RLlib sees the values ---------------
class _Catalog:
    pass


class _OwnCatalog(_Catalog):
    pass


class _Module:
    """A stand-in with RLModule's constructor signature."""

    def __init__(
        self,
        config=None,
        *,
        observation_space=None,
        action_space=None,
        inference_only=None,
        learner_only=False,
        model_config=None,
        catalog_class=None,
        **kwargs,
    ):
        pass


#: Constructor arguments RLlib never writes, each with the words the refusal names.
CTOR_ARGS = {
    "extra_positional": ((None, 1, 2), {}, "does not take"),
    "unknown_catalog": ((), {"catalog_class": int}, "catalog_class"),
    "catalog_instance": ((), {"catalog_class": _OwnCatalog()}, "catalog_class"),
    "negative_hidden": ((), {"model_config": {"fcnet_hiddens": [64, -1]}}, "fcnet_hiddens"),
    "float_hidden": ((), {"model_config": {"head_fcnet_hiddens": [1.5]}}, "head_fcnet_hiddens"),
    "zero_cell_size": ((), {"model_config": {"lstm_cell_size": 0}}, "lstm_cell_size"),
    "model_config_list": ((), {"model_config": [1, 2]}, "model_config"),
    "space_not_space": ((), {"observation_space": 3}, "observation_space"),
    "flag_not_bool": ((), {"inference_only": "yes"}, "inference_only"),
}


@pytest.mark.parametrize("case", list(CTOR_ARGS))
def test_rllib_constructor_arguments_are_checked_before_rllib_sees_them(case, monkeypatch):
    from zipsave.rllib import _ctor_check

    monkeypatch.setattr(_ctor_check, "_catalog_base", lambda: _Catalog)
    args, kwargs, words = CTOR_ARGS[case]
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape(words)) as excinfo:
        _ctor_check.check_ctor_args(_Module, args, kwargs, archive="m.zip", member="init.json")
    assert excinfo.value.member == "init.json" and "m.zip" in str(excinfo.value)
    # What RLlib writes passes; what the caller overrides is the caller's.
    _ctor_check.check_ctor_args(
        _Module,
        (),
        {"catalog_class": _OwnCatalog, "model_config": {"fcnet_hiddens": [64, 64]}, "inference_only": False},
        archive="m.zip",
        member="init.json",
    )
    _ctor_check.check_ctor_args(_Module, (), kwargs, archive="m.zip", member="init.json", skip=frozenset(kwargs))


@pytest.mark.parametrize(
    "name",
    [
        "metadata.json",
        "module_state.pkl",
        "class_and_ctor_args.pkl",
        "module_state.msgpack",
        "rllib_checkpoint.json",
        "..",
        ".",
        "a/b",
        "",
    ],
)
def test_to_rllib_refuses_a_component_named_as_a_file_before_writing(name, tmp_path):
    from zipsave.rllib._rllib_dir import check_dir_names
    from zipsave.rllib._tree import Node

    class Module:
        STATE_FILE_NAME = "module_state"

    tree = Node(cls=Module, children={"learner": Node(cls=Module, children={name: Node(cls=Module)})})
    with pytest.raises(zipsave.ArchiveFormatError, match="nothing was written") as excinfo:
        check_dir_names(tree, archive="m.zip")
    assert "m.zip" in str(excinfo.value)
    check_dir_names(
        Node(cls=Module, children={"learner": Node(cls=Module, children={"default_policy": Node(cls=Module)})})
    )


@pytest.mark.parametrize(
    "module",
    [
        # RLlib's example scripts parse sys.argv when imported: this one exited the loading
        # process with SystemExit(2) (usage printed) before the class was even looked up
        "ray.rllib.examples.ray_tune.appo_hyperparameter_tune",
        "ray.rllib.examples.offline_rl.cartpole_recording",
        "ray.rllib.conftest",
        "ray.rllib.algorithms.ppo.tests.test_ppo",
        "ray.rllib.tuned_examples.ppo.cartpole_ppo",
        "ray.rllibx.algorithms",
    ],
)
def test_an_rllib_class_is_imported_only_from_rllibs_library(module):
    import types

    from zipsave.rllib import _parts

    session = types.SimpleNamespace(name="m.zip", policy=types.SimpleNamespace(is_trusted=lambda module, name: False))
    before = set(sys.modules)
    with pytest.raises(zipsave.UnsafeGlobalError, match="not a class of RLlib's library and not trusted") as excinfo:
        _parts.resolve_class(session, f"{module}:Anything", "init.json")
    assert excinfo.value.member == "init.json"
    assert not {name for name in set(sys.modules) - before if name.startswith("ray")}  # refused before importing


@pytest.mark.parametrize(
    "module",
    [
        "ray.rllib.algorithms.ppo.ppo",
        "ray.rllib.core.learner.learner_group",
        "ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module",
        "ray.rllib.examples.rl_modules.classes.tiny_atari_cnn_rlm",  # a class the examples train
    ],
)
def test_rllibs_library_classes_are_still_looked_up(module):
    from zipsave.rllib import _parts

    assert _parts._library_module(module)
