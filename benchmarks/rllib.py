"""RLlib benchmark: save, load and restore of one PPO (a policy of >= 1e7 parameters) through
zipsave and through RLlib's own ``save_to_path`` / ``from_checkpoint`` / ``restore_from_path``.

Run in the RLlib venv (``tox -e rllib`` or ``.ci/run`` make one) from the repository root::

    python benchmarks/rllib.py --out /tmp/bench-rllib            # hidden 2560x3: 1.3e7 parameters
    python benchmarks/rllib.py --hidden 64 --out /tmp/smoke        # a quick check of the code

One run, one process, every operation timed once on the same algorithm (after one warm-up
save each), so the figures are ratios between peers measured side by side, not absolutes.
Writes ``rllib.json`` and ``rllib.txt`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def _learner_weights(algo) -> list:
    """Every remote learner's RLModule weights, as each learner reports them."""
    results = algo.learner_group.foreach_learner(lambda learner: learner.get_state(components="rl_module"))
    return [r.get()["rl_module"]["default_policy"] for r in results]


def _remote_rows(config, learners: int, work: str) -> list[dict]:
    """Save and whole restore of the same algorithm with ``learners`` remote learner actors."""
    import numpy as np

    import zipsave

    algo = config.copy().learners(num_learners=learners, num_cpus_per_learner=1).build_algo()
    try:
        algo.train()
        zip_path, dir_path = os.path.join(work, "remote.zip"), os.path.join(work, "remote")
        # warm-up of each path (imports and first calls in every actor process: zipsave's code
        # runs on the learners)
        zipsave.save(algo, zip_path)
        algo.save_to_path(dir_path)
        zipsave.restore(algo, zip_path)
        algo.restore_from_path(dir_path)
        shutil.rmtree(dir_path)
        os.remove(zip_path)
        saved = _learner_weights(algo)
        t_zs, _ = _timed(lambda: zipsave.save(algo, zip_path))
        t_rl, _ = _timed(lambda: algo.save_to_path(dir_path))
        rows = [
            {
                "op": f"save, {learners} remote learners",
                "zipsave_s": t_zs,
                "rllib_s": t_rl,
                "zipsave_bytes": _size(zip_path),
                "rllib_bytes": _size(dir_path),
            }
        ]
        algo.train()  # the learners move on: each restore below has to bring them back
        t_zs, _ = _timed(lambda: zipsave.restore(algo, zip_path))
        for weights in _learner_weights(algo):
            assert all(np.array_equal(weights[k], saved[0][k]) for k in saved[0])
        algo.train()
        t_rl, _ = _timed(lambda: algo.restore_from_path(dir_path))
        rows.append({"op": f"restore whole, {learners} r.l.", "zipsave_s": t_zs, "rllib_s": t_rl})
        return rows
    finally:
        algo.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hidden", type=int, default=2560, help="width of the 3 hidden layers (default 2560: 1.3e7 parameters)"
    )
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "zipsave-bench-rllib"))
    parser.add_argument(
        "--remote-learners",
        type=int,
        default=2,
        help="also time save and whole restore with this many remote learner actors (0: skip)",
    )
    args = parser.parse_args(argv)

    import numpy as np
    import ray
    import torch
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.algorithms.ppo import PPOConfig

    import zipsave

    ray.init(
        num_cpus=max(2, args.remote_learners),
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(train_batch_size_per_learner=64, minibatch_size=64, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [args.hidden] * 3})
    )
    algo = config.build_algo()
    algo.train()  # the optimizer holds its moments now: they are saved too
    params = sum(p.numel() for p in algo.get_module().parameters())
    module = "learner_group/learner/rl_module/default_policy"
    obs = torch.zeros(4, 4)

    def logits(a):
        with torch.no_grad():
            return a.get_module().forward_inference({"obs": obs})["action_dist_inputs"].numpy()

    work = tempfile.mkdtemp(prefix="zipsave-bench-rllib-")
    zip_path, dir_path = os.path.join(work, "ppo.zip"), os.path.join(work, "rllib")
    rows: list[dict] = []
    try:
        zipsave.save(algo, zip_path)  # warm-up (imports, first-touch)
        algo.save_to_path(dir_path)
        shutil.rmtree(dir_path)
        os.remove(zip_path)

        t_zs, _ = _timed(lambda: zipsave.save(algo, zip_path))
        t_rl, _ = _timed(lambda: algo.save_to_path(dir_path))
        rows.append(
            {
                "op": "save",
                "zipsave_s": t_zs,
                "rllib_s": t_rl,
                "zipsave_bytes": _size(zip_path),
                "rllib_bytes": _size(dir_path),
            }
        )

        t_zs, loaded = _timed(lambda: zipsave.load(zip_path))
        assert np.array_equal(logits(loaded), logits(algo))
        loaded.stop()
        t_rl, loaded = _timed(lambda: Algorithm.from_checkpoint(dir_path))
        assert np.array_equal(logits(loaded), logits(algo))
        rows.append({"op": "load (from_checkpoint)", "zipsave_s": t_zs, "rllib_s": t_rl})

        t_zs, _ = _timed(lambda: zipsave.restore(loaded, zip_path))
        t_rl, _ = _timed(lambda: loaded.restore_from_path(dir_path))
        rows.append({"op": "restore whole", "zipsave_s": t_zs, "rllib_s": t_rl})

        t_zs, _ = _timed(lambda: zipsave.restore(loaded, zip_path, component=module))
        t_rl, _ = _timed(lambda: loaded.restore_from_path(os.path.join(dir_path, module), component=module))
        assert np.array_equal(logits(loaded), logits(algo))
        rows.append({"op": "restore one module", "zipsave_s": t_zs, "rllib_s": t_rl})
        loaded.stop()
        algo.stop()
        algo = None  # its memory back before the remote learners start
        if args.remote_learners:
            rows += _remote_rows(config, args.remote_learners, work)
    finally:
        if algo is not None:
            algo.stop()
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)

    for row in rows:
        row["time_ratio"] = row["zipsave_s"] / row["rllib_s"]
        if "zipsave_bytes" in row:
            row["bytes_ratio"] = row["zipsave_bytes"] / row["rllib_bytes"]
    lines = [
        f"RLlib PPO, policy of {params:,} parameters (hidden {args.hidden}x3), one run; ratio = zipsave / RLlib"
        + ("; r.l. = remote learners" if args.remote_learners else ""),
        f"{'operation':<24}{'zipsave s':>11}{'RLlib s':>10}{'ratio':>8}{'zipsave MB':>12}{'RLlib MB':>10}{'ratio':>8}",
    ]
    for r in rows:
        size = (
            f"{r['zipsave_bytes'] / 1e6:>12.1f}{r['rllib_bytes'] / 1e6:>10.1f}{r['bytes_ratio']:>8.3f}"
            if "bytes_ratio" in r
            else ""
        )
        lines.append(f"{r['op']:<24}{r['zipsave_s']:>11.3f}{r['rllib_s']:>10.3f}{r['time_ratio']:>8.2f}{size}")
    text = "\n".join(lines)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "rllib.json"), "w") as f:
        json.dump({"params": params, "hidden": args.hidden, "ray": ray.__version__, "rows": rows}, f, indent=2)
    with open(os.path.join(args.out, "rllib.txt"), "w") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
