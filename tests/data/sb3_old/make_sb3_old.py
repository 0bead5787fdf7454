"""Make the archives of an SB3 before 2.7 (schedules pickled as closures) that
tests/test_sb3_schedules.py loads. Run once, in a venv with the old stack:

    python -m venv /work/venvs/sb3old
    /work/venvs/sb3old/bin/pip install torch==2.13.0
    /work/venvs/sb3old/bin/pip install stable-baselines3==2.0.0 "numpy<2" gymnasium==0.28.1 torch==2.13.0
    /work/venvs/sb3old/bin/python tests/data/sb3_old/make_sb3_old.py tests/data/sb3_old

Besides each ``<name>.zip`` it writes ``expected.json``: the versions used, a few observations
with the saved model's deterministic actions, and the values of its schedules.
"""

from __future__ import annotations

import json
import pathlib
import sys

import gymnasium as gym
import numpy as np
import stable_baselines3
import torch
from stable_baselines3 import A2C, DQN, PPO, SAC
from stable_baselines3.common.utils import get_linear_fn


def main(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    def small() -> dict:  # a fresh dict each time: SB3 adds keys to the one it is given
        return {"net_arch": [16, 16]}

    models = {
        # constant_fn closures: lr_schedule, clip_range
        "ppo_constant": PPO(
            "MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=1, seed=0, policy_kwargs=small()
        ),
        # a linear schedule as learning_rate (get_linear_fn's closure) and as clip_range
        "ppo_linear": PPO(
            "MlpPolicy",
            "CartPole-v1",
            n_steps=32,
            batch_size=32,
            n_epochs=1,
            seed=0,
            learning_rate=get_linear_fn(1e-3, 1e-4, 1.0),
            clip_range=get_linear_fn(0.3, 0.1, 0.5),
            policy_kwargs=small(),
        ),
        # a user's lambda: refused by a safe load
        "ppo_lambda": PPO(
            "MlpPolicy",
            "CartPole-v1",
            n_steps=32,
            batch_size=32,
            n_epochs=1,
            seed=0,
            learning_rate=lambda progress: 5e-4 * progress,
            policy_kwargs=small(),
        ),
        "a2c": A2C("MlpPolicy", "CartPole-v1", n_steps=8, seed=0, learning_rate=7e-4, policy_kwargs=small()),
        "dqn": DQN(
            "MlpPolicy",
            "CartPole-v1",
            buffer_size=500,
            learning_starts=16,
            seed=0,
            exploration_fraction=0.5,
            policy_kwargs=small(),
        ),
        "sac": SAC(
            "MlpPolicy",
            "Pendulum-v1",
            buffer_size=500,
            learning_starts=16,
            seed=0,
            learning_rate=1e-3,
            policy_kwargs=small(),
        ),
    }
    expected: dict = {
        "versions": {
            "stable_baselines3": stable_baselines3.__version__,
            "numpy": np.__version__,
            "gymnasium": gym.__version__,
            "torch": torch.__version__,
        },
        "models": {},
    }
    for name, model in models.items():
        model.learn(64)
        model.save(out / f"{name}.zip")
        rng = np.random.default_rng(0)
        low, high = model.observation_space.low, model.observation_space.high
        obs = rng.uniform(np.maximum(low, -2), np.minimum(high, 2), size=(4, *low.shape)).astype(np.float32)
        actions, _ = model.predict(obs, deterministic=True)
        entry = {
            "class": type(model).__name__,
            "observations": obs.tolist(),
            "actions": actions.tolist(),
            "lr_schedule": [model.lr_schedule(p) for p in (1.0, 0.5, 0.0)],
        }
        if hasattr(model, "clip_range"):
            entry["clip_range"] = [model.clip_range(p) for p in (1.0, 0.5, 0.0)]
        if hasattr(model, "exploration_schedule"):
            entry["exploration_schedule"] = [model.exploration_schedule(p) for p in (1.0, 0.7, 0.0)]
        expected["models"][name] = entry
    (out / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent))
