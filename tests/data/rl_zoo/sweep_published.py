"""Load every agent of a checkout of https://github.com/DLR-RM/rl-trained-agents through SB3's
own ``load`` and through zipsave's two doors, and print a JSON line per agent: whether each
loaded, whether zipsave's weights and spaces equal SB3's, and each schedule's values at
progress 1 and 0.5. Not a test (the repository is some 90 MB); docs/sb3.rst cites its result.

Run with gym 0.26 importable (SB3 needs it for gym-era spaces)::

    pip install --target /tmp/gymenv --no-deps gym==0.26.2 gym_notices
    PYTHONPATH=/tmp/gymenv python tests/data/rl_zoo/sweep_published.py /path/to/rl-trained-agents

HER agents need an environment and are skipped by SB3 and zipsave alike without one
(``tests/test_rl_zoo.py`` loads one with an env of its saved spaces).
"""

from __future__ import annotations

import json
import pathlib
import sys
import warnings
import zipfile

import torch
from sb3_contrib import ARS, QRDQN, TQC, TRPO
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3

import zipsave
import zipsave.sb3

CLASSES = {"a2c": A2C, "ppo": PPO, "dqn": DQN, "sac": SAC, "td3": TD3, "ddpg": DDPG}
CLASSES.update(qrdqn=QRDQN, tqc=TQC, ars=ARS, trpo=TRPO)
#: What the RL Zoo's enjoy.py passes on Python 3.8+ for closures it cannot rebuild.
ZOO_OBJECTS = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0}


def algorithm(path: pathlib.Path) -> type:
    if path.parts[-3] != "her":
        return CLASSES[path.parts[-3]]
    policy = zipfile.ZipFile(path).read("data").decode().split('"policy_class"')[1][:3000]
    return TQC if "tqc" in policy else SAC


def schedule(model: object, name: str) -> object:
    value = getattr(model, name, None)
    return [float(value(1.0)), float(value(0.5))] if callable(value) else value


def load(door: str, cls: type, path: pathlib.Path) -> object:
    if door == "sb3":
        return cls.load(path, device="cpu", custom_objects=ZOO_OBJECTS)
    if door == "zipsave":
        return zipsave.load(path, cls=cls, device="cpu")
    with zipsave.sb3.installed():
        return cls.load(path, device="cpu")


def main() -> None:
    for path in sorted(pathlib.Path(sys.argv[1]).glob("*/*/*.zip")):
        cls, row, reference = algorithm(path), {"agent": "/".join(path.parts[-3:])}, None
        for door in ("sb3", "zipsave", "install"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = load(door, cls, path)
            except Exception as err:  # noqa: BLE001 - a row per agent, whatever failed
                row[door] = f"{type(err).__name__}: {str(err)[:200]}"
                continue
            weights = model.policy.state_dict()
            out = {k: schedule(model, k) for k in ("learning_rate", "clip_range") if hasattr(model, k)}
            if door == "sb3":
                reference = (weights, model.observation_space, model.action_space)
            elif reference is not None:
                out["same_weights"] = weights.keys() == reference[0].keys() and all(
                    torch.equal(weights[k], reference[0][k]) for k in weights
                )
                out["same_spaces"] = (model.observation_space, model.action_space) == reference[1:]
            row[door] = out
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
