"""Shared test configuration: deterministic torch, hypothesis kept out of the repo."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "zipsave-hypothesis"))
# SB3's `learn()` makes a `SB3-<date>` folder in the temp dir for its logger unless SB3_LOGDIR
# names one: thousands per run of the suite. One folder for the run (its subprocesses too),
# removed at the end; one that a killed run left (a timeout's SIGTERM skips atexit) is removed
# by the next run, which finds its process gone.
_SB3_LOGS = "zipsave-test-sb3-logs-"


def _remove_orphaned_sb3_logs() -> None:
    if os.name != "posix":  # os.kill(pid, 0) asks only on POSIX (on Windows it terminates)
        return
    for entry in os.scandir(tempfile.gettempdir()):
        pid = entry.name[len(_SB3_LOGS) :].partition("-")[0] if entry.name.startswith(_SB3_LOGS) else ""
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            pass  # alive, another user's


if "SB3_LOGDIR" not in os.environ:
    _remove_orphaned_sb3_logs()
    os.environ["SB3_LOGDIR"] = tempfile.mkdtemp(prefix=f"{_SB3_LOGS}{os.getpid()}-")
    atexit.register(shutil.rmtree, os.environ["SB3_LOGDIR"], ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

torch.set_num_threads(1)

# Hypothesis's two checks that time the machine, not the code: an example slower than the
# 200 ms `deadline`, or data generation it finds `too_slow`, fail a property test whose every
# example holds when a loaded CI machine stalls the process once (a rerun that then takes
# 20 ms is reported as flaky and fails too). What an example asserts is unchanged; settings a
# test gives itself still win over these.
settings.register_profile("zipsave", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("zipsave")


@pytest.fixture
def installed():
    """SB3's doors routed through zipsave (``zipsave.sb3.install()``) for one test."""
    import zipsave.sb3  # here, not at the top: most tests must not import SB3

    zipsave.sb3.install()
    try:
        yield
    finally:
        zipsave.sb3.uninstall()


@pytest.fixture(scope="session")
def td3_saved(tmp_path_factory):
    """The bytes of a small TD3 archive with a NormalActionNoise (the noise suites change it)."""
    pytest.importorskip("stable_baselines3")
    import numpy as np
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import NormalActionNoise

    path = tmp_path_factory.mktemp("td3") / "td3.zip"
    noise = NormalActionNoise(np.zeros(1), np.full(1, 0.1))
    kwargs = {"learning_starts": 4, "buffer_size": 64, "batch_size": 4, "policy_kwargs": {"net_arch": [8]}}
    TD3("MlpPolicy", "Pendulum-v1", action_noise=noise, seed=0, device="cpu", **kwargs).save(path)
    return path.read_bytes()
