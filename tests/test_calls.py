"""An option passed by position to a public function whose options are keyword-only: a
``UsageError`` (a ``TypeError``) that says how to call it, instead of Python's "takes 1
positional argument but 2 were given"."""

from __future__ import annotations

import inspect
import re

import pytest
import torch

import zipsave
import zipsave.sb3


class Algo(zipsave.Saveable):
    def __init__(self, env=None, width=4):
        self.net = torch.nn.Linear(width, 2)


def _raises(call, message):
    with pytest.raises(zipsave.UsageError, match=re.escape(message)) as caught:
        call()
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, zipsave.ZipsaveError)
    return caught.value


def test_a_class_passed_by_position_to_load_names_cls(tmp_path):
    Algo().save(tmp_path / "a.zip")
    _raises(
        lambda: zipsave.load(tmp_path / "a.zip", Algo),
        "`zipsave.load()` takes 1 positional argument (`path`) but 2 were given: its options are keyword-only. "
        "Call it as `zipsave.load(path, cls=Algo)`.",
    )
    assert isinstance(zipsave.load(tmp_path / "a.zip", cls=Algo), Algo)  # the call it names works
    params = inspect.signature(zipsave.load).parameters  # the signature is still load's own
    assert params["cls"].kind is inspect.Parameter.KEYWORD_ONLY and "overrides" in params


def test_sb3_habits_get_the_keyword_sb3_takes_in_that_place(tmp_path):
    algo = Algo()
    _raises(
        lambda: zipsave.save(algo, tmp_path / "a.zip", ["net"]), "Call it as `zipsave.save(obj, path, exclude=...)`."
    )
    algo.save(tmp_path / "a.zip")
    _raises(lambda: Algo.load(tmp_path / "a.zip", "my-env"), "Call it as `Algo.load(path, env=...)`.")
    _raises(lambda: algo.load(tmp_path / "a.zip", "my-env"), "Call it as `Algo(...).load(path, env=...)`.")
    _raises(
        lambda: zipsave.load_archive(tmp_path / "a.zip", False),
        "Call it as `zipsave.load_archive(path, load_data=...)`.",
    )


def test_without_a_guess_the_options_are_listed(tmp_path):
    _raises(
        lambda: zipsave.restore(Algo(), tmp_path / "a.zip", "net"),
        "`zipsave.restore()` takes 2 positional arguments (`obj`, `path`) but 3 were given: its options are "
        "keyword-only. Pass it by name (`component=`, `into=`, `exact_match=`, `exclude=`, `custom_objects=`, "
        "`device=`, ...).",
    )
    _raises(lambda: zipsave.inspect(tmp_path / "a.zip", True), "Pass it by name (`limits=`, `storage_options=`")


def test_a_method_counts_its_arguments_as_its_caller_does(tmp_path):
    manager = zipsave.CheckpointManager(tmp_path / "run")
    _raises(
        lambda: manager.save(1, {"step": 1}, {"reward": 1.0}),
        "`CheckpointManager.save()` takes 2 positional arguments (`step`, `obj`) but 3 were given: its options are "
        "keyword-only. Call it as `CheckpointManager.save(step, obj, metrics=...)`.",
    )
    _raises(lambda: zipsave.CheckpointManager(tmp_path / "run", 3), "Pass it by name (`keep_last=`, `keep_best=`")


def test_functions_of_options_only_say_so():
    with pytest.raises(
        zipsave.UsageError, match=re.escape("`zipsave.sb3.install()` takes 0 positional arguments but 1 was given")
    ):
        zipsave.sb3.install(True)
    with pytest.raises(zipsave.UsageError, match=re.escape("Pass it by name (`allow_pickle=`, `trusted=`, `strict=`")):
        with zipsave.sb3.installed(True):
            pass
    with pytest.raises(zipsave.UsageError, match=re.escape("Call it as `zipsave.sign(path, signer, signature=...)`")):
        zipsave.sign("m.zip", "key.pem", "m.zip.sig")  # refused before any file is looked at
