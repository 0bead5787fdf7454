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
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO

    path = tmp_path / "ppo.zip"
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=0, device="cpu")
    zipsave.save(model, path)
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
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO

    path = tmp_path / "ppo.zip"
    zipsave.save(PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, seed=0, device="cpu"), path)
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
