"""Tune experiments whose trials checkpoint through zipsave (one ``algo.zip`` per Tune checkpoint
directory): ``num_to_keep`` honoured, a trial whose actor dies resumes from its latest archive,
``Tuner.restore`` resumes an errored experiment; local and S3 (moto) storage."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest
import rllib_helpers
from conftest import FILTER_WARNINGS

import zipsave

pytestmark = [pytest.mark.filterwarnings(w) for w in FILTER_WARNINGS] + [pytest.mark.slow]
WEIGHT = "learner_group/learner/rl_module/default_policy/module/pi.net.mlp.0.weight"


def _run_config(name, storage_path, max_failures, filesystem=None):
    from ray import tune

    return tune.RunConfig(
        name=name,
        storage_path=storage_path,
        storage_filesystem=filesystem,
        verbose=0,
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        failure_config=tune.FailureConfig(max_failures=max_failures),
    )


def _params(scratch, **hooks):
    return {"algo_config": rllib_helpers.tune_config(), "iterations": 4, "scratch": str(scratch), **hooks}


def _assert_resumed_from_the_latest_archive(scratch, died_at):
    """The trial restored the archive of the iteration before it died, and held its weights."""
    archive = scratch / "resumed_from.zip"
    assert (scratch / "died").exists() and archive.exists()
    with zipfile.ZipFile(archive) as z:
        assert json.loads(z.read("data"))["training_iteration"] == died_at
    np.testing.assert_array_equal(np.load(scratch / "resumed_weights.npy"), zipsave.read(archive, WEIGHT).numpy())


def _checkpoints(fs, trial_path):
    """The checkpoint folders of a trial and their files, through a pyarrow file system."""
    from pyarrow.fs import FileSelector, FileType

    found = {}
    for info in fs.get_file_info(FileSelector(trial_path)):
        if info.type == FileType.Directory and os.path.basename(info.path).startswith("checkpoint_"):
            found[os.path.basename(info.path)] = sorted(
                os.path.basename(f.path) for f in fs.get_file_info(FileSelector(info.path))
            )
    return found


def test_a_trial_whose_actor_dies_resumes_from_its_latest_zipsave_checkpoint(ray_session, tmp_path):
    from pyarrow.fs import LocalFileSystem
    from ray import tune

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    tuner = tune.Tuner(
        rllib_helpers.tune_trainable,
        param_space=_params(scratch, die_at=2, how="exit"),
        run_config=_run_config("killed", str(tmp_path / "results"), max_failures=1),
    )
    results = tuner.fit()
    assert not results.errors, results.errors
    result = results[0]
    assert result.metrics["iteration"] == 4
    _assert_resumed_from_the_latest_archive(scratch, died_at=2)
    # num_to_keep=2: the last two checkpoints remain, each one zipsave archive
    kept = _checkpoints(LocalFileSystem(), result.path)
    assert list(kept.values()) == [["algo.zip"], ["algo.zip"]], kept
    final = zipsave.load(os.path.join(result.checkpoint.path, "algo.zip"))
    try:
        assert final.training_iteration == 4
    finally:
        final.stop()


def test_tuner_restore_resumes_an_errored_experiment_on_s3(ray_session, s3_url, tmp_path):
    import pyarrow.fs
    from ray import tune

    fs = pyarrow.fs.S3FileSystem(
        endpoint_override=os.environ["AWS_ENDPOINT_URL"],
        scheme="http",
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
    )
    storage = s3_url[len("s3://") :] + "/tune"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    first = tune.Tuner(
        rllib_helpers.tune_trainable,
        param_space=_params(scratch, die_at=2, how="raise"),
        run_config=_run_config("interrupted", storage, max_failures=0, filesystem=fs),
    ).fit()
    assert first.errors and first[0].metrics["iteration"] == 2
    tuner = tune.Tuner.restore(
        f"{storage}/interrupted", trainable=rllib_helpers.tune_trainable, resume_errored=True, storage_filesystem=fs
    )
    results = tuner.fit()
    assert not results.errors, results.errors
    assert results[0].metrics["iteration"] == 4
    _assert_resumed_from_the_latest_archive(scratch, died_at=2)
    kept = _checkpoints(fs, results[0].path)
    assert list(kept.values()) == [["algo.zip"], ["algo.zip"]], kept
