"""A first load imports only the integrations it needs: the one the archive names (or whose
members it holds), or the one whose classes the caller passes. Each case runs in a fresh
interpreter, where nothing was imported before."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import zipsave
from zipsave import _registry

INTEGRATIONS = ("zipsave.sb3", "stable_baselines3", "zipsave.rllib", "ray")


def _fresh(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ppo_archive(tmp_path):
    """A small PPO saved to ``tmp_path / "ppo.zip"``: the model and the path."""
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO

    path = tmp_path / "ppo.zip"
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=0, device="cpu")
    zipsave.save(model, path)
    return model, path


@pytest.mark.parametrize("key", ["model", "policy"])  # `policy.pth` is also what SB3's archives hold
def test_first_save_load_and_inspect_of_a_plain_torch_archive_import_no_integration(tmp_path, key):
    path = str(tmp_path / "net.zip")
    code = (
        "import json, sys, torch, zipsave\n"
        "seen = {}\n"
        f"net = torch.nn.Linear(3, 2); opt = torch.optim.Adam(net.parameters())\n"
        f"zipsave.save({{{key!r}: net, {key + '.optimizer'!r}: opt, 'step': 3}}, {path!r})\n"
        "seen['save'] = [m for m in %r if m in sys.modules]\n"
        f"zipsave.load_archive({path!r})\n"
        "seen['load_archive'] = [m for m in %r if m in sys.modules]\n"
        f"zipsave.load({path!r}); zipsave.inspect({path!r})\n"
        "seen['load, inspect'] = [m for m in %r if m in sys.modules]\n"
        "print(json.dumps(seen))"
    ) % (INTEGRATIONS, INTEGRATIONS, INTEGRATIONS)
    assert _fresh(code) == {"save": [], "load_archive": [], "load, inspect": []}


def test_an_sb3_archive_still_loads_with_cls_and_through_install(tmp_path):
    model, path = _ppo_archive(tmp_path)
    obs = [[0.1, 0.2, 0.3, 0.4]]
    want = model.predict(obs, deterministic=True)[0].tolist()
    for call in (
        f"from stable_baselines3 import PPO; m = zipsave.load({str(path)!r}, cls=PPO, device='cpu')",
        (
            "import zipsave.sb3; zipsave.sb3.install(); from stable_baselines3 import PPO; "
            f"m = PPO.load({str(path)!r}, device='cpu')"
        ),
    ):
        code = f"import json, zipsave\n{call}\nprint(json.dumps(m.predict({obs}, deterministic=True)[0].tolist()))"
        assert _fresh(code) == want


def test_an_sb3_archive_without_cls_imports_the_sb3_handler_by_its_members(tmp_path):
    _, path = _ppo_archive(tmp_path)
    code = (
        "import json, sys, zipsave\n"
        f"data, params, _ = zipsave.load_archive({str(path)!r})\n"
        "print(json.dumps(['zipsave.sb3' in sys.modules, sorted(params)]))"
    )
    imported, params = _fresh(code)
    assert imported and "policy" in params


@pytest.mark.parametrize("name", sorted(_registry.ENTRY_HINTS))
def test_entry_hints_match_what_the_handler_classes_declare(name):
    handler = _registry.by_name(name)
    assert handler is not None, f"the `{name}` entry point is declared in setup.cfg"
    assert _registry.ENTRY_HINTS[name] == (handler.libraries, handler.markers, handler.data_keys)


# -- what `import zipsave` and the allowlist import ----------------------------------------------
LAZY_MODULES = (
    "zipsave._api._load",
    "zipsave._api._background",
    "zipsave._core",
    "zipsave._manager",
    "zipsave._tools",
    "zipsave._trust",
    "cloudpickle",
)


def test_import_zipsave_imports_its_parts_on_first_use():
    code = (
        "import json, sys, torch, zipsave\n"
        f"seen = {{'import': [m for m in {LAZY_MODULES!r} if m in sys.modules]}}\n"
        "from zipsave import load_archive, CheckpointManager, inspect, Limits\n"
        "seen['names'] = [load_archive.__module__, CheckpointManager.__module__, inspect.__module__, Limits.__name__]\n"
        "seen['dir'] = set(zipsave.__all__) <= set(dir(zipsave)) and '_registry' in dir(zipsave)\n"
        "seen['private'] = [zipsave._registry.__name__, zipsave._api._shadow.__name__]\n"
        "seen['load'] = [m for m in ('zipsave._api._background', 'cloudpickle') if m in sys.modules]\n"
        "print(json.dumps(seen))"
    )
    assert _fresh(code) == {
        "import": [],
        "names": ["zipsave._api._load", "zipsave._manager._checkpoints", "zipsave._tools._inspect", "Limits"],
        "dir": True,
        "private": ["zipsave._registry", "zipsave._api._shadow"],
        "load": [],
    }


def test_a_missing_attribute_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        zipsave.no_such_name  # noqa: B018


def test_load_with_sb3_cls_imports_no_other_integration(tmp_path):
    _, path = _ppo_archive(tmp_path)
    code = (
        "import json, sys, zipsave\n"
        "from stable_baselines3 import PPO\n"
        f"m = zipsave.load({str(path)!r}, cls=PPO, device='cpu')\n"
        f"print(json.dumps([type(m).__name__, [x for x in {INTEGRATIONS!r} if x in sys.modules]]))"
    )
    assert _fresh(code) == ["PPO", ["zipsave.sb3", "stable_baselines3"]]
    # inspect judges the pickled values under the names a load of the archive would trust
    code = (
        "import json, sys, zipsave\n"
        f"info = zipsave.inspect({str(path)!r})\n"
        "untrusted = sorted(g for e in info.data for g in e.untrusted)\n"
        "globals_ = sorted(g for e in info.data for g in e.globals)\n"
        f"print(json.dumps([untrusted, len(globals_) > 0, [x for x in {INTEGRATIONS!r} if x in sys.modules]]))"
    )
    assert _fresh(code) == [[], True, ["zipsave.sb3"]]


def test_an_integration_nothing_selected_adds_no_names_and_is_not_imported():
    """Attacker's view: a pickle naming SB3's reviewed class in a process that involved no SB3
    is refused, as without SB3's handler, and imports neither SB3 nor its handler; once the
    handler is imported (as an SB3 load does first), the same name is allowed."""
    pytest.importorskip("stable_baselines3")
    from zipsave.sb3 import SB3_ALLOWLIST

    name = "stable_baselines3.common.policies.ActorCriticPolicy"
    assert name in SB3_ALLOWLIST
    payload = ("c%s\n%s\n." % tuple(name.rsplit(".", 1))).encode()
    code = (
        "import json, sys, zipsave\n"
        "from zipsave._trust import TrustPolicy, default_allowlist, restricted_loads\n"
        "seen = {}\n"
        f"try:\n    restricted_loads({payload!r}, TrustPolicy())\nexcept zipsave.UnsafeGlobalError as err:\n"
        "    seen['before'] = type(err).__name__\n"
        f"seen['allowed before'] = {name!r} in default_allowlist()\n"
        "seen['imported'] = [m for m in ('zipsave.sb3', 'stable_baselines3') if m in sys.modules]\n"
        "import zipsave.sb3\n"
        f"seen['allowed after'] = {name!r} in default_allowlist()\n"
        f"seen['after'] = restricted_loads({payload!r}, TrustPolicy()).__name__\n"
        "print(json.dumps(seen))"
    )
    assert _fresh(code) == {
        "before": "UnsafeGlobalError",
        "allowed before": False,
        "imported": [],
        "allowed after": True,
        "after": "ActorCriticPolicy",
    }


def test_a_registered_handler_widens_the_cached_allowlist_and_unregistering_narrows_it():
    from zipsave._trust import default_allowlist

    class _Extra(_registry.Handler):
        name = "test-extra-allowlist"
        allowlist = frozenset({"collections.ChainMap"})

    assert "collections.ChainMap" not in default_allowlist()
    _registry.register(_Extra())
    try:
        assert "collections.ChainMap" in default_allowlist()
    finally:
        _registry.unregister(_Extra.name)
    assert "collections.ChainMap" not in default_allowlist()
