"""Write the format-1 archives kept under tests/data/format1/ (run from the repo root:
``python tests/data/format1/make_format1.py``). They must load with every later zipsave."""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parents[2])]  # tests/ (model classes), the repo

from models import Algo  # noqa: E402

import zipsave  # noqa: E402


def main(out: pathlib.Path = HERE) -> None:
    algo = Algo(learning_rate=1e-3, net_arch=(8,)).train_step(3)
    algo.notes = {"seed": 0, "tags": ("format", 1), "big": np.arange(20000, dtype=np.int32)}
    algo.save(out / "algo.zip")
    net = torch.nn.Linear(3, 2)
    with torch.no_grad():
        net.weight.copy_(torch.arange(6.0).reshape(2, 3))
        net.bias.fill_(0.5)
    zipsave.save({"model": net, "step": 7}, out / "app_state.zip")
    obs = np.linspace(-1, 1, 40, dtype=np.float32).reshape(10, 4)
    expected = {
        "algo_predict": algo.predict(obs).tolist(),
        "algo_num_timesteps": algo.num_timesteps,
        "algo_log_ent_coef": float(algo.log_ent_coef.detach()),
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


if __name__ == "__main__":
    main()
