"""A new user's round thirteen: what they did, what zipsave said, and what it says now. Each
test failed on the tree before its fix."""

from __future__ import annotations

import re

import pytest

import zipsave

pytest.importorskip("stable_baselines3")  # the `test` extra installs it

from stable_baselines3 import A2C, PPO, SAC, TD3  # noqa: E402


def _ppo(**kwargs):
    return PPO(
        "MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=1, policy_kwargs={"net_arch": [8]}, **kwargs
    )


def _a2c():
    return A2C("MlpPolicy", "CartPole-v1", policy_kwargs={"net_arch": [8]})


def test_a_sac_archive_restored_into_a_ppo_names_both_algorithms(tmp_path):
    # it said "holds state dicts [...], but the object has [...]" and "pass exact_match=False"
    zipsave.save(
        SAC("MlpPolicy", "Pendulum-v1", buffer_size=100, policy_kwargs={"net_arch": [8]}), tmp_path / "sac.zip"
    )
    with pytest.raises(zipsave.ParameterMismatchError) as caught:
        zipsave.restore(_ppo(), tmp_path / "sac.zip")
    text = str(caught.value)
    assert "holds a SAC model, which cannot be restored into the PPO given: its state dicts are [" in text
    assert "zipsave.load(path, cls=SAC)` (`from stable_baselines3 import SAC`)" in text
    assert "exact_match=False" not in text


def test_a_ppo_archive_restored_into_an_a2c_is_refused_before_anything_is_set(tmp_path):
    # the two hold the same state dicts: the restore returned, the A2C held PPO's n_steps=32 and
    # its first learn raised IndexError inside SB3's rollout buffer
    zipsave.save(_ppo(), tmp_path / "ppo.zip")
    a2c = _a2c()
    with pytest.raises(
        zipsave.ParameterMismatchError,
        match=re.escape(
            "holds a PPO model, which cannot be restored into the A2C given. Restore it into a model of PPO"
        ),
    ):
        zipsave.restore(a2c, tmp_path / "ppo.zip")
    assert a2c.n_steps == 5 and not hasattr(a2c, "clip_range")
    a2c.learn(10)
    zipsave.save(_a2c(), tmp_path / "a2c.zip")
    with pytest.raises(
        zipsave.ParameterMismatchError, match=re.escape("holds an A2C model, which cannot be restored into the PPO")
    ):
        zipsave.restore(_ppo(), tmp_path / "a2c.zip")


def test_a_restore_into_the_algorithm_that_saved_it_or_a_subclass_goes_on(tmp_path):
    class MyPPO(PPO):
        pass

    zipsave.save(_ppo(), tmp_path / "ppo.zip")
    zipsave.restore(
        MyPPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, policy_kwargs={"net_arch": [8]}),
        tmp_path / "ppo.zip",
    )
    # a TD3 with policy_delay=1 is what the archive calls DDPG; a TD3 takes it
    td3 = TD3("MlpPolicy", "Pendulum-v1", buffer_size=100, policy_delay=1, policy_kwargs={"net_arch": [8]})
    zipsave.save(td3, tmp_path / "td3.zip")
    zipsave.restore(
        TD3("MlpPolicy", "Pendulum-v1", buffer_size=100, policy_kwargs={"net_arch": [8]}), tmp_path / "td3.zip"
    )


# -- a SimpleNamespace that cloudpickle wrote -------------------------------------------------
def test_a_simple_namespace_cloudpickle_wrote_loads_with_no_trust(tmp_path):
    # SB3's own save (and zipsave before 0.2) pickles it as cloudpickle's
    # `_builtin_type('SimpleNamespace')`: the load skipped it and asked for allow_pickle=True
    import types

    from stable_baselines3.common.save_util import save_to_zip_file

    config = types.SimpleNamespace(lr=3e-4, layers=[64, 64])
    save_to_zip_file(tmp_path / "sb3.zip", data={"config": config, "n": 1})
    data, _, _ = zipsave.load_archive(tmp_path / "sb3.zip", strict=True)
    assert data == {"config": config, "n": 1}
    (entry,) = [e for e in zipsave.inspect(tmp_path / "sb3.zip").data if e.key == "config"]
    assert entry.globals == ("types.SimpleNamespace",) and entry.trusted


def test_cloudpickles_builtin_type_gives_only_trusted_classes_of_types():
    import pickle

    from zipsave._trust import TrustPolicy, pickle_globals, restricted_loads

    def payload(argument):  # `cloudpickle.cloudpickle._builtin_type(argument)`
        return (
            b"\x80\x04\x8c\x17cloudpickle.cloudpickle\x8c\r_builtin_type\x93"
            + pickle.dumps(argument, 4)[2:-1]
            + b"\x85R."
        )

    assert restricted_loads(payload("SimpleNamespace"), TrustPolicy()) is __import__("types").SimpleNamespace
    for name in ("CodeType", "FunctionType", "ModuleType"):
        with pytest.raises(zipsave.UnsafeGlobalError, match=re.escape(f"untrusted global `types.{name}`")):
            restricted_loads(payload(name), TrustPolicy())
        assert pickle_globals(payload(name)) == [f"types.{name}"]
    with pytest.raises(zipsave.UnsafeGlobalError, match="No module or class is named so"):
        restricted_loads(payload(7), TrustPolicy())
    assert pickle_globals(payload(7)) == ["cloudpickle.cloudpickle._builtin_type"]


# -- SB3's CheckpointCallback order -----------------------------------------------------------
def test_checkpoint_callback_in_sb3s_positional_order_says_the_call_to_make(tmp_path):
    # `CheckpointCallback(1000, "./logs/")` said "takes 1 positional argument but 2 were given";
    # `CheckpointCallback(1000)` raised "expected str, bytes or os.PathLike object, not int"
    import zipsave.sb3

    with pytest.raises(zipsave.UsageError) as caught:
        zipsave.sb3.CheckpointCallback(1000, str(tmp_path / "logs"), "rl_model")
    text = str(caught.value)
    assert "is called in SB3's order (`save_freq`, `save_path`, `name_prefix`)" in text
    assert f"Call it as `zipsave.sb3.CheckpointCallback({str(tmp_path / 'logs')!r}, every_steps=1000)`" in text
    assert "`name_prefix`: nothing: checkpoints are named by their step" in text
    with pytest.raises(zipsave.UsageError, match=re.escape("CheckpointCallback(directory, every_steps=1000)")):
        zipsave.sb3.CheckpointCallback(1000)
    with pytest.raises(
        zipsave.UsageError, match=re.escape("Call it as `zipsave.sb3.CheckpointCallback(directory, every_steps=...)`")
    ):
        zipsave.sb3.CheckpointCallback(tmp_path / "logs", 1000)
    assert not (tmp_path / "logs").exists()


# -- paths that name a folder, and bytes passed as a path -------------------------------------
@pytest.mark.parametrize("name", ["runs/", ".", "..", "runs/./"])
@pytest.mark.parametrize("background", [False, True])
def test_a_save_to_a_folder_path_is_refused_before_it_writes(tmp_path, monkeypatch, name, background):
    # `zipsave.save(model, "runs/")` wrote a hidden `runs/.zip`, and `save(model, ".")` a `..zip`
    import torch

    work = tmp_path / "work"
    (work / "runs").mkdir(parents=True)
    monkeypatch.chdir(work)
    with pytest.raises(
        zipsave.UsageError, match=re.escape("names a folder, not the archive's file: give a file name in it")
    ):
        zipsave.save({"net": torch.nn.Linear(2, 2)}, name, background=background)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["runs", "work"]


def test_a_save_to_a_url_ending_in_a_slash_is_refused():
    import torch

    with pytest.raises(zipsave.UsageError, match=re.escape("such as `memory://round13/model.zip`")):
        zipsave.save({"net": torch.nn.Linear(2, 2)}, "memory://round13/")


def test_an_archive_s_bytes_passed_as_the_path_name_io_bytesio(tmp_path):
    # it raised Python's bare `ValueError: embedded null byte`
    import torch

    zipsave.save({"net": torch.nn.Linear(2, 2)}, tmp_path / "a.zip")
    data = (tmp_path / "a.zip").read_bytes()
    for door in (zipsave.load, zipsave.inspect, zipsave.load_archive):
        with pytest.raises(
            zipsave.UsageError,
            match=re.escape(
                "a zip archive, not a file name: to read an archive held in memory, pass `io.BytesIO(data)`"
            ),
        ):
            door(data)


# -- a damaged checkpoint index, in the index's own terms -------------------------------------
@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            lambda d: d["checkpoints"][0]["metrics"].update(loss=[1, 2]),
            'the entry of step 1000 has a metric "loss" that is an array, not a number',
        ),
        (
            lambda d: d["checkpoints"][0].update(metrics=[1]),
            "the entry of step 1000 has `metrics` that are an array, not an object",
        ),
        (
            lambda d: d["checkpoints"][0].update(time="yesterday"),
            "the entry of step 1000 has a `time` that is a string, not a number of seconds",
        ),
        (lambda d: d["checkpoints"][0].pop("time"), "the entry of step 1000 has no `time`."),
        (
            lambda d: d["checkpoints"].__setitem__(0, "x"),
            "entry 1 of `checkpoints` is a string, where each entry is an object",
        ),
        (lambda d: d.update(checkpoints=5), "`checkpoints` is a number, not an array."),
    ],
)
def test_zipsave_list_of_a_damaged_index_names_the_entry_in_json_terms(tmp_path, capsys, change, said):
    # it said "entry 0 is malformed (TypeError: metric 'loss' is a list, not a number, string or
    # bool)", "(KeyError: 'time')"; `"checkpoints": 5` was "unexpected TypeError ... a zipsave bug"
    import json

    import torch

    from zipsave.cli import main

    with zipsave.CheckpointManager(tmp_path / "run") as manager:
        manager.save(1000, {"net": torch.nn.Linear(2, 2)}, metrics={"loss": 0.5})
    index = tmp_path / "run" / "zipsave-checkpoints.json"
    doc = json.loads(index.read_text())
    change(doc)
    index.write_text(json.dumps(doc))
    assert main(["list", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert said in err and "Error:" not in err and "'" not in err.split("zipsave-checkpoints.json`")[1].split(".")[0]


def test_include_of_a_name_the_model_does_not_have_is_said(tmp_path):
    # `include=["replay_bufer"]` saved no buffer and said nothing; the resumed run had none
    from stable_baselines3 import DQN

    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=100, policy_kwargs={"net_arch": [8]})
    with pytest.warns(
        zipsave.ZipsaveWarning,
        match=re.escape(
            "include=['replay_bufer']: DQN has no attribute `replay_bufer`, so nothing was saved for it (did you mean `replay_buffer`?)."
        ),
    ):
        zipsave.save(model, tmp_path / "dqn.zip", include=["replay_bufer"])
    names = [m.name for m in zipsave.inspect(tmp_path / "dqn.zip").members]
    assert "policy.pth" in names and not any(n.startswith("replay_buffer") for n in names)


def test_a_missing_remote_archive_is_a_file_not_found_error_as_a_local_one_is():
    # `except FileNotFoundError` caught a missing local archive but not `memory://bucket/nope.zip`
    with pytest.raises(
        zipsave.ArchiveNotFoundError, match=re.escape("archive `memory://round13/nope.zip`: no such object")
    ) as caught:
        zipsave.load("memory://round13/nope.zip")
    assert isinstance(caught.value, FileNotFoundError) and caught.value.errno == 2


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda p: zipsave.load(p, custom_objects=["learning_rate"]), "custom_objects must be a dict of `data` keys"),
        (lambda p: zipsave.load(42), "path must be a file path (str or os.PathLike)"),
    ],
)
def test_a_call_with_an_option_of_the_wrong_kind_is_a_usage_error(tmp_path, call, said):
    # they were Python's own TypeError, outside zipsave's hierarchy (`except zipsave.ZipsaveError` missed them)
    import torch

    zipsave.save({"net": torch.nn.Linear(2, 2)}, tmp_path / "a.zip")
    with pytest.raises(zipsave.UsageError, match=re.escape(said)):
        call(tmp_path / "a.zip")


def test_zipsave_verify_of_a_plain_folder_says_what_it_takes(tmp_path, capsys):
    # it said "archive `runs`: is a directory, not a zip archive", though verify takes a
    # CheckpointManager's folder and a sharded checkpoint's
    from zipsave.cli import main

    (tmp_path / "runs").mkdir()
    assert main(["verify", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "is a folder, but neither a CheckpointManager's (no `zipsave-checkpoints.json`)" in err
    assert "give an archive file" in err
