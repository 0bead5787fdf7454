"""Archives that cross dependency stacks: write them on one stack, check them on another.

``python tests/data/crossversion/crossversion.py write DIR`` saves, with the installed
gymnasium/numpy/SB3, a PPO (Dict observations of Box, Discrete and MultiDiscrete; MultiDiscrete
actions), a SAC (Box observations and actions) and an app-state dict holding those spaces, plus
``expected.json``: the versions that wrote them and the actions they take on fixed observations.
``... check DIR`` loads them with the installed stack and asserts equal spaces and equal actions.

The committed archives (``newest/``: gymnasium 1.x and numpy 2.x; ``lowest/``: the stack of
``.ci/constraints-lowest.txt``) are checked on every stack by ``tests/test_crossversion.py``;
``.ci/run`` also writes fresh ones on each stack and checks them on the other. Remake a folder
on its own stack (run from the repo root with that stack's Python)::

    python tests/data/crossversion/crossversion.py write tests/data/crossversion/newest
"""

from __future__ import annotations

import json
import pathlib
import sys
from importlib import metadata
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repo, ahead of any installed zipsave

import zipsave  # noqa: E402

#: How far a float32 output computed here may be from the one the writing machine computed:
#: torch's CPU kernels sum in another order on another CPU (AVX-512 against AVX2 gave outputs
#: 3.7e-7 apart, relatively), while a weight loaded wrong moves them by orders of magnitude more.
FLOAT32_KERNELS = {"rtol": 1e-5, "atol": 1e-6}

VERSIONED = ("zipsave", "gymnasium", "numpy", "stable-baselines3", "torch", "cloudpickle", "orjson")


# The spaces are built with the arguments every supported gymnasium takes (no sort_keys, no
# Discrete dtype), so the reading stack can build the same ones to compare.
def obs_space() -> spaces.Dict:
    return spaces.Dict(
        {
            "pos": spaces.Box(-1.0, 1.0, (3,), dtype=np.float32),
            "mode": spaces.Discrete(3),
            "flags": spaces.MultiDiscrete([2, 3, 4]),
        }
    )


def multi_action_space() -> spaces.MultiDiscrete:
    return spaces.MultiDiscrete([3, 2])


def box_obs_space() -> spaces.Box:
    return spaces.Box(low=np.array([-2.0, -1.0, 0.0], np.float32), high=np.array([2.0, 1.0, 5.0], np.float32))


def box_action_space() -> spaces.Box:
    return spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)


class _Env(gym.Env):
    """Rewards nothing in particular; only its spaces matter."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.observation_space = observation_space
        self.action_space = action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return self.observation_space.sample(), 0.5, False, False, {}


def observations() -> dict[str, Any]:
    """Fixed observations, made without any random generator (versions draw differently)."""
    pos = np.linspace(-0.9, 0.9, 15, dtype=np.float32).reshape(5, 3)
    return {
        "ppo": {
            "pos": pos,
            "mode": np.array([0, 1, 2, 0, 1], dtype=np.int64),
            "flags": np.array([[0, 0, 0], [1, 2, 3], [0, 1, 2], [1, 0, 3], [1, 2, 0]], dtype=np.int64),
        },
        "sac": np.stack([pos[:, 0] * 2, pos[:, 1], pos[:, 2] + 1.0], axis=1).astype(np.float32),
        "net": pos,
    }


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def _app_state(net: torch.nn.Module, optim: torch.optim.Optimizer) -> dict[str, Any]:
    return {
        "model": net,
        "optim": optim,
        "observation_space": obs_space(),
        "action_space": multi_action_space(),
        "spaces": [box_obs_space(), spaces.Discrete(5, start=-2), spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]))],
        "step": 7,
    }


def _versions() -> dict[str, str]:
    return {name: zipsave.__version__ if name == "zipsave" else metadata.version(name) for name in VERSIONED}


def write(out: pathlib.Path) -> None:
    from stable_baselines3 import PPO, SAC

    out.mkdir(parents=True, exist_ok=True)
    obs = observations()
    ppo = PPO(
        "MultiInputPolicy",
        _Env(obs_space(), multi_action_space()),
        n_steps=16,
        batch_size=16,
        n_epochs=1,
        policy_kwargs={"net_arch": [16]},
        seed=0,
        device="cpu",
    )
    ppo.learn(32)
    zipsave.save(ppo, out / "ppo.zip")
    sac = SAC(
        "MlpPolicy",
        _Env(box_obs_space(), box_action_space()),
        learning_starts=8,
        batch_size=8,
        buffer_size=64,
        policy_kwargs={"net_arch": [16]},
        seed=0,
        device="cpu",
    )
    sac.learn(16)
    zipsave.save(sac, out / "sac.zip")
    net = _net()
    optim = torch.optim.Adam(net.parameters(), lr=1e-2)
    net(torch.from_numpy(obs["net"])).pow(2).mean().backward()
    optim.step()
    zipsave.save(_app_state(net, optim), out / "app_state.zip")
    with torch.no_grad():
        net_out = net(torch.from_numpy(obs["net"])).numpy()
    expected = {
        "written_with": _versions(),
        "schedule_objects": _schedule_objects(),
        "ppo": ppo.predict(obs["ppo"], deterministic=True)[0].tolist(),
        "sac": sac.predict(obs["sac"], deterministic=True)[0].tolist(),
        "net": net_out.tolist(),
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


def _schedule_objects() -> bool:
    from stable_baselines3.common import utils

    return hasattr(utils, "FloatSchedule")


def _load(path: pathlib.Path, cls: type, expected: dict[str, Any]) -> Any:
    """Load an SB3 model; only the entries an older SB3 cannot hold may be skipped.

    SB3 2.7 and later store schedules as objects (``FloatSchedule``...); older ones as
    closures, pickled by value, which zipsave never loads (they carry code). Where either side
    has closures, ``lr_schedule`` and ``clip_range`` are skipped with a warning and rebuilt by
    the model: ``lr_schedule`` from ``learning_rate``, ``clip_range`` from the constructor's
    default (which these archives use).
    """
    import warnings

    report = zipsave.LoadReport()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = zipsave.load(path, cls=cls, report=report)
    skipped = {entry.key for entry in report.skipped}
    both_objects = _schedule_objects() and expected["schedule_objects"]
    allowed = set() if both_objects else {"lr_schedule", "clip_range"}
    assert skipped <= allowed, (path, report.skipped)
    unexpected = [w for w in caught if not issubclass(w.category, zipsave.SkippedEntryWarning)]
    assert not unexpected, [str(w.message) for w in unexpected]
    return model


def check(folder: pathlib.Path) -> dict[str, str]:
    """Load the archives in ``folder`` here and assert equal spaces and actions; return the
    versions that wrote them."""
    from stable_baselines3 import PPO, SAC

    expected = json.loads((folder / "expected.json").read_text())
    obs = observations()
    ppo = _load(folder / "ppo.zip", PPO, expected)
    assert ppo.observation_space == obs_space(), ppo.observation_space
    assert list(ppo.observation_space.spaces) == list(obs_space().spaces)
    assert ppo.action_space == multi_action_space(), ppo.action_space
    assert ppo.clip_range(1.0) == 0.2 and ppo.learning_rate == 3e-4
    np.testing.assert_array_equal(ppo.predict(obs["ppo"], deterministic=True)[0], expected["ppo"])
    sac = _load(folder / "sac.zip", SAC, expected)
    assert sac.observation_space == box_obs_space(), sac.observation_space
    assert sac.action_space == box_action_space(), sac.action_space
    actions = sac.predict(obs["sac"], deterministic=True)[0]
    np.testing.assert_allclose(actions, np.array(expected["sac"], dtype=actions.dtype), **FLOAT32_KERNELS)
    net = _net()
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    state: dict[str, Any] = {
        "model": net,
        "optim": torch.optim.Adam(net.parameters(), lr=1e-2),
        "observation_space": None,
        "action_space": None,
        "spaces": None,
        "step": 0,
    }
    zipsave.restore(state, folder / "app_state.zip", strict=True)
    reference = _app_state(net, state["optim"])
    for name in ("observation_space", "action_space", "spaces", "step"):
        assert state[name] == reference[name], (name, state[name])
    assert all(type(a) is type(b) for a, b in zip(state["spaces"], reference["spaces"]))
    with torch.no_grad():
        out = net(torch.from_numpy(obs["net"])).numpy()
    np.testing.assert_allclose(out, np.array(expected["net"], dtype=np.float32), **FLOAT32_KERNELS)
    return expected["written_with"]


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[0] not in ("write", "check"):
        raise SystemExit(f"usage: python {sys.argv[0]} write|check DIR")
    folder = pathlib.Path(argv[1])
    if argv[0] == "write":
        write(folder)
        print(f"wrote {folder} with {_versions()}")
    else:
        written = check(folder)
        print(f"{folder}: written with {written}, loads with {_versions()}: same spaces, same actions")


if __name__ == "__main__":
    main(sys.argv[1:])
