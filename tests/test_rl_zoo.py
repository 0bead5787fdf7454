"""The RL Zoo through ``python -m zipsave.sb3``: the real ``rl_zoo3.train`` and
``rl_zoo3.enjoy`` save and load through zipsave, and the Zoo's archives load with zipsave's
defaults keeping their schedules (``lin_0.001`` learning rate, ``lin_0.2`` clip range)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import warnings
import zipfile

import pytest

import zipsave

pytest.importorskip("rl_zoo3")  # the `test` extra installs it

from stable_baselines3 import PPO  # noqa: E402

ROOT = pathlib.Path(zipsave.__file__).parents[1]


def run_zoo(cwd: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "zipsave.sb3", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def zoo_run(tmp_path_factory):
    """Train PPO on CartPole for one rollout (256 steps) with the Zoo's own hyperparameters."""
    folder = tmp_path_factory.mktemp("zoo")
    out = run_zoo(folder, "rl_zoo3.train", "--algo", "ppo", "--env", "CartPole-v1", "-n", "256", "-f", "logs",
                  "--seed", "3", "--eval-freq", "-1")
    assert out.returncode == 0, out.stderr[-3000:]
    return folder, folder / "logs" / "ppo" / "CartPole-v1_1" / "CartPole-v1.zip"


def test_zoo_train_saves_through_zipsave(zoo_run):
    _, archive = zoo_run
    names = zipfile.ZipFile(archive).namelist()
    assert "manifest.json" in names and "_zipsave_version" in names


def test_zoo_archive_loads_with_the_defaults_keeping_its_schedules(zoo_run):
    _, archive = zoo_run
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped
        model = zipsave.load(archive, cls=PPO, device="cpu")
    reference = PPO.load(archive, device="cpu")  # SB3's own loader (plain cloudpickle)
    assert type(model.learning_rate).__name__ == "SimpleLinearSchedule"
    for progress in (1.0, 0.5, 0.1):
        assert model.lr_schedule(progress) == reference.lr_schedule(progress)
        assert model.clip_range(progress) == reference.clip_range(progress)
    assert model.lr_schedule(0.5) == pytest.approx(0.0005)  # the Zoo's lin_0.001
    assert model.clip_range(0.5) == pytest.approx(0.1)  # lin_0.2


def test_zoo_enjoy_loads_through_zipsave(zoo_run):
    folder, _ = zoo_run
    out = run_zoo(folder, "rl_zoo3.enjoy", "--algo", "ppo", "--env", "CartPole-v1", "-f", "logs", "--exp-id", "1",
                  "-n", "50", "--no-render", "--deterministic")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Loading logs/ppo/CartPole-v1_1/CartPole-v1.zip" in out.stdout
    assert "Warning" not in out.stderr, out.stderr[-3000:]
