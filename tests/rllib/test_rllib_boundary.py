"""RLlib's doors inside the one error boundary, on a real RLModule archive: constructor arguments
in ``init.json`` that RLlib never writes are refused before RLlib sees them, and ``to_rllib``
refuses a component named as a file RLlib keeps. (The checks themselves, without Ray, are in
``tests/test_adversarial_boundary.py``.)"""

from __future__ import annotations

import json
import re
import warnings
import zipfile

import pytest
from conftest import FILTER_WARNINGS

import zipsave
from zipsave.rllib import to_rllib

pytestmark = [pytest.mark.filterwarnings(w) for w in FILTER_WARNINGS]
MODULE = "learner_group/learner/rl_module/default_policy"
INIT = f"{MODULE}/init.json"


def _rewrite(src, dst, change) -> int:
    """``src`` with ``INIT`` passed through ``change(json) -> (json, count)``; without its
    manifest (so the edit is not reported as damage); returns how many values were changed."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        count = 0
        for item in zin.infolist():
            if item.filename == "manifest.json":
                continue
            raw = zin.read(item)
            if item.filename == INIT:
                doc, count = change(json.loads(raw))
                raw = json.dumps(doc).encode()
            zout.writestr(item.filename, raw)
    return count


def _replace_strings(old: str, new: str):
    def change(doc):
        text = json.dumps(doc)
        return json.loads(text.replace(old, new)), text.count(old)

    return change


def _negative_hiddens(doc):
    count = 0

    def walk(node):
        nonlocal count
        if isinstance(node, dict):
            for key, value in node.items():
                if key.endswith("hiddens") and isinstance(value, list) and value and all(type(v) is int for v in value):
                    node[key] = [-v for v in value]
                    count += 1
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    return doc, count


def _load_module(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zipsave.ZipsaveWarning)
        return zipsave.load(path, component=MODULE)


def test_another_allowlisted_catalog_is_refused_before_rllib_sees_it(ppo_zip, tmp_path):
    bad = tmp_path / "catalog.zip"
    changed = _rewrite(ppo_zip, bad, _replace_strings("ppo.ppo_catalog:PPOCatalog", "dqn.dqn_catalog:DQNCatalog"))
    assert changed, "the module's init.json names no PPOCatalog"
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("constructor argument `catalog_class`")) as excinfo:
        _load_module(bad)
    assert excinfo.value.member == INIT


def test_negative_hidden_sizes_are_refused_before_rllib_sees_them(ppo_zip, tmp_path):
    bad = tmp_path / "hiddens.zip"
    changed = _rewrite(ppo_zip, bad, _negative_hiddens)
    assert changed, "the module's init.json holds no layer sizes"
    with pytest.raises(zipsave.ArchiveFormatError, match="not a list of positive layer sizes") as excinfo:
        _load_module(bad)
    assert excinfo.value.member == INIT


def test_the_untouched_module_still_loads(ppo_zip, tmp_path):
    same = tmp_path / "same.zip"
    _rewrite(ppo_zip, same, lambda doc: (doc, 0))
    assert type(_load_module(same)).__name__ == "DefaultPPOTorchRLModule"


@pytest.mark.parametrize("name", ["metadata.json", "module_state.pkl"])
def test_to_rllib_refuses_a_component_named_as_a_file(name, ppo_zip, tmp_path):
    bad = tmp_path / "names.zip"
    with zipfile.ZipFile(ppo_zip) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            if item.filename == "manifest.json":
                continue
            raw = zin.read(item)
            zout.writestr(item.filename, raw)
            if item.filename.startswith(f"{MODULE}/") and item.filename.count("/") == MODULE.count("/") + 1:
                zout.writestr(f"{MODULE}/{name}/{item.filename.rpartition('/')[2]}", raw)
    with pytest.raises(zipsave.ArchiveFormatError, match="nothing was written"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", zipsave.ZipsaveWarning)
            to_rllib(bad, tmp_path / "out", trusted=["rllib_helpers.mean_std_filter"])
    assert not (tmp_path / "out").exists()


def test_an_example_script_named_by_init_json_is_never_imported(tmp_path, monkeypatch):
    # Importing RLlib's example script parsed the loading program's own sys.argv: an unknown
    # flag there and the load printed RLlib's usage and raised SystemExit(2) out of zipsave.load.
    import sys

    module = "ray.rllib.examples.ray_tune.appo_hyperparameter_tune"
    base, bad = tmp_path / "base.zip", tmp_path / "script.zip"
    zipsave.save({"a": 1}, base)
    with zipfile.ZipFile(base) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            if item.filename != "manifest.json":
                zout.writestr(item.filename, zin.read(item))
        zout.writestr("init.json", json.dumps({"handler": "rllib", "class": f"{module}:APPOConfig", "args": {}}))
    monkeypatch.setattr(sys, "argv", ["host-program", "--its-own-flag"])
    with pytest.raises(zipsave.UnsafeGlobalError, match="not a class of RLlib's library") as excinfo:
        _load_module_root(bad)
    assert excinfo.value.member == "init.json"
    assert module not in sys.modules


def _load_module_root(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zipsave.ZipsaveWarning)
        return zipsave.load(path)
