"""The RLlib tests share one local Ray session; they run only where Ray RLlib is installed (its own
venv: ``tox -e rllib`` and ``.ci/run``), and the main venv does not collect them."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

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
    # Logical CPUs, more than the machine's: remote learners (1 CPU each), EnvRunners and Tune
    # trials of several tests' algorithms are held at once; each of them is mostly idle.
    ray.init(
        num_cpus=16, include_dashboard=False, log_to_driver=False, configure_logging=False, _node_ip_address="127.0.0.1"
    )
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
    """A bucket on a real S3-compatible server (tests/moto_server.py); the URL's options come
    from the environment (AWS_ENDPOINT_URL)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    try:
        from moto_server import moto_endpoint
    finally:
        sys.path.pop(0)
    with moto_endpoint(endpoint_in_env=True) as endpoint:
        import s3fs

        s3fs.S3FileSystem(skip_instance_cache=True, client_kwargs={"endpoint_url": endpoint}).mkdir("zipsave-rllib")
        yield "s3://zipsave-rllib"
