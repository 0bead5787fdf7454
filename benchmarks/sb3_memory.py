"""Peak resident memory of loading an SB3 PPO: SB3's ``PPO.load`` and ``load_from_zip_file``
against ``zipsave.load(cls=PPO)`` and ``zipsave.load_archive``.

An untrained PPO whose policy holds ``--width``-wide layers (``net_arch=[w, w]``) is saved
with SB3. Each load runs in a fresh interpreter, after one load of a small archive of the same
kind so that imports and the first optimizer do not count; the figure is the growth of the
peak resident set (``VmHWM``, reset through ``/proc/self/clear_refs``) above the resident set
before the load, as a multiple of the policy's weight bytes. Linux only.

Usage::

    python benchmarks/sb3_memory.py                                  # width 4900 (~191 MiB), 3 runs
    python benchmarks/sb3_memory.py --smoke                          # tiny, what a check runs
    python benchmarks/sb3_memory.py --out benchmarks/results/sb3-memory
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: The script of one measurement (also run by tests/test_sb3.py): MODE WARM_UP PATH.
MEASURE = """
import gc, json, sys
import torch
torch.set_num_threads(1)
mode, warm_up, path = sys.argv[1:4]
from stable_baselines3 import PPO
from stable_baselines3.common.save_util import load_from_zip_file
import zipsave

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

def run(path):
    if mode == "PPO.load":
        return PPO.load(path, device="cpu")
    if mode == "zipsave.load(..., cls=PPO)":
        return zipsave.load(path, cls=PPO, device="cpu")
    if mode == "load_from_zip_file":
        return load_from_zip_file(path, device="cpu")
    return zipsave.load_archive(path, device="cpu")

run(warm_up)
gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = status("VmRSS:")
result = run(path)
print(json.dumps({"peak": status("VmHWM:") - base}))
"""

MODES = ("PPO.load", "zipsave.load(..., cls=PPO)", "load_from_zip_file", "zipsave.load_archive")


def ppo_archive(path: Path, width: int) -> int:
    from stable_baselines3 import PPO

    model = PPO(
        "MlpPolicy", "CartPole-v1", policy_kwargs={"net_arch": [width, width], "ortho_init": False}, device="cpu"
    )
    model.save(path)
    return sum(p.numel() * p.element_size() for p in model.policy.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=4900)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="width 64, one run")
    parser.add_argument("--out", help="write OUT.json and OUT.txt")
    args = parser.parse_args()
    width, runs = (64, 1) if args.smoke else (args.width, args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp) / "big.zip", Path(tmp) / "small.zip"
        nbytes = ppo_archive(big, width)
        ppo_archive(small, 8)
        peaks: dict[str, list[int]] = {mode: [] for mode in MODES}
        for _ in range(runs):
            for mode in MODES:
                done = subprocess.run(
                    [sys.executable, "-c", MEASURE, mode, str(small), str(big)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                peaks[mode].append(json.loads(done.stdout)["peak"])
    rows = {mode: statistics.median(values) for mode, values in peaks.items()}
    lines = [
        f"PPO, net_arch [{width}, {width}]: {nbytes / 2**20:.0f} MiB of weights; median of {runs} fresh processes",
        f"{'call':<30} {'peak growth':>12} {'x weights':>10}",
    ]
    for mode, peak in rows.items():
        lines.append(f"{mode:<30} {peak / 2**20:>8.0f} MiB {peak / nbytes:>10.2f}")
    print("\n".join(lines))
    if args.out:
        Path(args.out + ".txt").write_text("\n".join(lines) + "\n")
        Path(args.out + ".json").write_text(
            json.dumps({"width": width, "weights_bytes": nbytes, "runs": runs, "peaks": peaks}, indent=2)
        )


if __name__ == "__main__":
    main()
