"""Record what SB3's own load of the RL Zoo's published agents in this folder does, for
tests/test_rl_zoo.py: the actions each agent takes on fixed observations, and its schedules.

The archives are copied unchanged from https://github.com/DLR-RM/rl-trained-agents (commit
cd35bde): ``ars/Pendulum-v1_1/Pendulum-v1.zip`` (sb3-contrib 1.3, Python 3.7: closures in
cloudpickle 1.x's ``_builtin_type('LambdaType')`` layout), ``ppo/CartPole-v1_1/CartPole-v1.zip``
(SB3 1.0rc0: the RL Zoo's ``linear_schedule`` closures, same layout) and
``sac/Pendulum-v1_1/Pendulum-v1.zip`` (SB3 of July 2020: numpy 1.x dtype pickles with integer
``align``/``copy``, cloudpickle's ``_make_skel_func``/``_fill_function`` closures, and torch's
legacy pre-zip ``.pth`` streams).

Run with gym 0.26 importable (SB3 needs it for gym-era spaces), e.g.
``pip install --target /tmp/gymenv --no-deps gym==0.26.2 gym_notices`` and
``PYTHONPATH=/tmp/gymenv python tests/data/rl_zoo/make_expected.py``.
SB3 2.x cannot rebuild a Python 3.7 code object: it drops those schedules with a warning and
the model falls back to the constructor's defaults. There the recorded values are those of
the pickled closure (``constant_fn`` or the Zoo's ``linear_schedule``, its one number read off
the pickle with ``pickletools``, nothing run), marked ``"sb3": false``.
"""

from __future__ import annotations

import base64
import json
import pathlib
import pickletools
import warnings
import zipfile

import numpy as np

HERE = pathlib.Path(__file__).parent
PROGRESS = (1.0, 0.5, 0.1)


def closure_values(path: pathlib.Path, key: str) -> list[float]:
    """The schedule a pickled ``constant_fn``/``linear_schedule`` closure computes, from its pickle."""
    entry = json.loads(zipfile.ZipFile(path).read("data"))[key]
    ops = list(pickletools.genops(base64.b64decode(entry[":serialized:"])))
    (value,) = {arg for op, arg, _ in ops if op.name == "BINFLOAT"}
    linear = any(isinstance(arg, str) and arg.startswith("linear_schedule.<locals>") for _, arg, _ in ops)
    return [p * value if linear else value for p in PROGRESS]


def main() -> None:
    from sb3_contrib import ARS
    from stable_baselines3 import PPO, SAC

    classes = {"ars": ARS, "ppo": PPO, "sac": SAC}
    expected = {}
    for path in sorted(HERE.glob("*.zip")):
        cls = classes[path.name.split("_")[0]]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = cls.load(path, device="cpu")
        dropped = {
            str(w.message).split("object ")[1].split(".")[0]
            for w in caught
            if "Could not deserialize object" in str(w.message)
        }
        space = model.observation_space
        rng = np.random.default_rng(0)
        observations = rng.uniform(np.maximum(space.low, -5), np.minimum(space.high, 5), (5, *space.shape))
        observations = observations.astype(space.dtype)
        actions, _ = model.predict(observations, deterministic=True)
        schedules = {}
        for name in ("lr_schedule", "clip_range", "delta_std_schedule"):
            if name in dropped:
                schedules[name] = {"values": closure_values(path, name), "sb3": False}
            elif callable(getattr(model, name, None)):
                schedules[name] = {"values": [float(getattr(model, name)(p)) for p in PROGRESS], "sb3": True}
        expected[path.name] = {
            "class": cls.__name__,
            "observations": observations.tolist(),
            "actions": np.asarray(actions).tolist(),
            "schedules": schedules,
        }
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
