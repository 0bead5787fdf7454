"""Write the SB3 archives under tests/data/sb3/ that tests/test_sb3.py loads forever.

Run from the repository root with the SB3 version to record (these were made with
stable-baselines3 2.9.2, torch 2.13.0, numpy 2.4, gymnasium 1.4, Python 3.11)::

    python tests/data/sb3/make_sb3_archives.py

Each archive is what ``model.save(path)`` writes after a few seeded training steps of a tiny
network. ``expected.json`` records, per archive, the algorithm, the ``data`` keys, the state-dict
members, and the deterministic actions SB3 predicted for a few fixed observations, so a test
can check a load without SB3 having to be the same version.
"""

from __future__ import annotations

import json
import pathlib
import platform

import gymnasium as gym
import numpy as np
import stable_baselines3
import torch
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.save_util import load_from_zip_file

HERE = pathlib.Path(__file__).resolve().parent


def _models():
    tiny = {"net_arch": [16]}
    yield (
        "ppo_cartpole",
        PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=1, policy_kwargs=dict(tiny), seed=0),
        128,
    )
    yield (
        "dqn_cartpole",
        DQN("MlpPolicy", "CartPole-v1", learning_starts=32, buffer_size=500, policy_kwargs=dict(tiny), seed=0),
        128,
    )
    yield (
        "sac_pendulum",
        SAC("MlpPolicy", "Pendulum-v1", learning_starts=32, buffer_size=500, policy_kwargs=dict(tiny), seed=0),
        96,
    )


def main() -> None:
    torch.manual_seed(0)
    expected = {
        "made_with": {
            "stable_baselines3": stable_baselines3.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "gymnasium": gym.__version__,
            "python": platform.python_version(),
        },
        "archives": {},
    }
    for name, model, steps in _models():
        model.learn(steps)
        path = HERE / f"{name}.zip"
        model.save(path)
        space = model.observation_space
        space.seed(1)
        observations = np.stack([space.sample() for _ in range(5)])
        actions, _ = model.predict(observations, deterministic=True)
        data, params, variables = load_from_zip_file(path)
        expected["archives"][path.name] = {
            "algorithm": type(model).__name__,
            "data_keys": list(data),
            "params": sorted(params),
            "pytorch_variables": sorted(variables or {}),
            "observations": observations.tolist(),
            "actions": actions.tolist(),
        }
        print(f"{path.name}: {path.stat().st_size} bytes")
    (HERE / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


if __name__ == "__main__":
    main()
