"""The RLlib tests share one local Ray session; they run only where Ray RLlib is installed (its own
venv: ``tox -e rllib`` and ``.ci/run``), and the main venv does not collect them."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time

import pytest

# RLlib pins its own gymnasium, so it lives in its own venv, which runs this folder for real.
collect_ignore_glob = [] if importlib.util.find_spec("ray") is not None else ["*.py"]

FILTER_WARNINGS = [
    "ignore::DeprecationWarning",
    "ignore::PendingDeprecationWarning",
    "ignore::UserWarning:ray.*",
    "ignore::UserWarning:gymnasium.*",
    "ignore::FutureWarning",
    "ignore::ResourceWarning",
]


@pytest.fixture(scope="session")
def ray_session():
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # The Ray workers import the tests' connector factory (rllib_helpers) by name.
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def ppo(ray_session):
    """A PPO trained one iteration, with a MeanStdFilter on one remote EnvRunner."""
    import rllib_helpers

    algo = rllib_helpers.ppo_config().build_algo()
    algo.train()
    yield algo
    algo.stop()


@pytest.fixture(scope="session")
def ppo_zip(ppo, tmp_path_factory):
    import zipsave

    path = tmp_path_factory.mktemp("ppo") / "ppo.zip"
    zipsave.save(ppo, path)
    return path


@pytest.fixture(scope="session")
def s3_url():
    """A bucket on a real S3-compatible server (moto's server mode) on 127.0.0.1, as in
    tests/test_remote.py; the URL's options come from the environment (AWS_ENDPOINT_URL)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto server did not start on {endpoint}")
                time.sleep(0.05)
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_ACCESS_KEY_ID", "testing")
            env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            env.setenv("AWS_DEFAULT_REGION", "us-east-1")
            env.setenv("AWS_EC2_METADATA_DISABLED", "true")
            env.setenv("AWS_ENDPOINT_URL", endpoint)
            env.delenv("AWS_PROFILE", raising=False)
            import s3fs

            s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": endpoint}).mkdir("zipsave-rllib")
            yield "s3://zipsave-rllib"
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
