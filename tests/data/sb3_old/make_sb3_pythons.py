"""Make archives of an SB3 before 2.7 (schedules pickled as closures) on another CPython than
the suite's, for tests/test_sb3_pythons.py: a safe load on any Python must keep every schedule.
Each folder ``py<X.Y>-sb3-<version>/`` holds a tiny PPO, DQN, SAC and TD3 and ``expected.json``
(the versions used, observations with the saved model's deterministic actions, and the values
of its schedules). Made with, for CPython 3.12 (torch 2.13.0 comes from pip's cache):

    python3.12 -m venv /tmp/sb3-py312 && /tmp/sb3-py312/bin/pip install torch==2.13.0
    /tmp/sb3-py312/bin/pip install stable-baselines3==2.3.2 gymnasium==0.29.1 "numpy<2"
    /tmp/sb3-py312/bin/python tests/data/sb3_old/make_sb3_pythons.py
    /tmp/sb3-py312/bin/pip install stable-baselines3==2.0.0 gymnasium==0.28.1 "numpy<2"
    /tmp/sb3-py312/bin/python tests/data/sb3_old/make_sb3_pythons.py

and the same for CPython 3.13, where numpy 1.x does not install, with ``"numpy>=2.1,<2.3"``
(numpy 2.2.6) instead of ``"numpy<2"`` (gymnasium 0.29's and 0.28's environment checker
predates numpy 2, so it is switched off). ``python3.12`` is pyenv's 3.12.1 and ``python3.13``
its 3.13.0 here; the venvs took torch from the suite's venvs of those Pythons (a ``.pth`` file
naming their site-packages) rather than installing it again.
"""

from __future__ import annotations

import json
import pathlib
import sys

import gymnasium as gym
import numpy as np
import stable_baselines3
import torch
from stable_baselines3 import DQN, PPO, SAC, TD3
from stable_baselines3.common.utils import get_linear_fn


def _env(name: str) -> gym.Env:
    return gym.make(name, disable_env_checker=True)


def models() -> dict:
    def small() -> dict:  # a fresh dict each time: SB3 adds keys to the one it is given
        return {"net_arch": [8]}

    return {
        # get_linear_fn's closure as learning_rate, constant_fn's for clip_range
        "ppo": PPO(
            "MlpPolicy",
            _env("CartPole-v1"),
            n_steps=32,
            batch_size=32,
            n_epochs=1,
            seed=0,
            learning_rate=get_linear_fn(1e-3, 1e-4, 1.0),
            clip_range=0.25,
            policy_kwargs=small(),
        ),
        # exploration_schedule: get_linear_fn's closure
        "dqn": DQN(
            "MlpPolicy",
            _env("CartPole-v1"),
            buffer_size=200,
            learning_starts=16,
            seed=0,
            learning_rate=5e-4,
            exploration_fraction=0.5,
            policy_kwargs=small(),
        ),
        "sac": SAC(
            "MlpPolicy",
            _env("Pendulum-v1"),
            buffer_size=200,
            learning_starts=16,
            seed=0,
            learning_rate=get_linear_fn(3e-3, 3e-4, 0.5),
            policy_kwargs=small(),
        ),
        "td3": TD3(
            "MlpPolicy",
            _env("Pendulum-v1"),
            buffer_size=200,
            learning_starts=16,
            seed=0,
            learning_rate=7e-4,
            policy_kwargs=small(),
        ),
    }


def main(root: pathlib.Path) -> None:
    torch.manual_seed(0)
    out = root / f"py{sys.version_info[0]}.{sys.version_info[1]}-sb3-{stable_baselines3.__version__}"
    out.mkdir(parents=True, exist_ok=True)
    expected: dict = {
        "versions": {
            "python": sys.version.split()[0],
            "stable_baselines3": stable_baselines3.__version__,
            "numpy": np.__version__,
            "gymnasium": gym.__version__,
            "torch": torch.__version__,
        },
        "models": {},
    }
    for name, model in models().items():
        model.learn(48)
        model.save(out / f"{name}.zip")
        rng = np.random.default_rng(0)
        low, high = model.observation_space.low, model.observation_space.high
        obs = rng.uniform(np.maximum(low, -2), np.minimum(high, 2), size=(4, *low.shape)).astype(np.float32)
        actions, _ = model.predict(obs, deterministic=True)
        entry = {
            "class": type(model).__name__,
            "observations": obs.tolist(),
            "actions": actions.tolist(),
            "lr_schedule": [float(model.lr_schedule(p)) for p in (1.0, 0.5, 0.0)],
        }
        if hasattr(model, "clip_range"):
            entry["clip_range"] = [float(model.clip_range(p)) for p in (1.0, 0.5, 0.0)]
        if hasattr(model, "exploration_schedule"):
            entry["exploration_schedule"] = [float(model.exploration_schedule(p)) for p in (1.0, 0.7, 0.0)]
        expected["models"][name] = entry
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent))
