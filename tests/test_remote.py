"""fsspec URLs: memory://, file:// and a real S3 round trip against a moto server on loopback."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import uuid

import pytest
import torch
from moto_server import moto_endpoint

import zipsave
from zipsave._archive import _remote

fsspec = pytest.importorskip("fsspec")

pytestmark = [
    # botocore / aiobotocore may deprecate things under us; that is not zipsave's concern
    pytest.mark.filterwarnings("ignore::DeprecationWarning:botocore.*"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:aiobotocore.*"),
]


class Policy(zipsave.Saveable):
    def __init__(self, width=8, seed=0):
        torch.manual_seed(seed)
        self.policy = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Tanh(), torch.nn.Linear(width, 2))
        self.policy.optimizer = torch.optim.Adam(self.policy.parameters())
        self.steps = 0


class Algo(zipsave.Saveable):
    def __init__(self, seed=0):
        self.learner = Policy(seed=seed)
        self.gamma = 0.9


class Unpicklable:
    def state_dict(self):
        return {"f": lambda: 0}

    def load_state_dict(self, sd):
        pass


def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def round_trip(url: str, **options) -> None:
    """Every entry point against one URL."""
    algo = Algo(seed=3)
    algo.learner.steps = 11
    zipsave.save(algo, url, **options)

    loaded = zipsave.load(url, **options)
    assert same(loaded.learner.policy, algo.learner.policy) and loaded.learner.steps == 11

    part = zipsave.load(url, component="learner", **options)
    assert type(part) is Policy and same(part.policy, algo.learner.policy)

    fresh = Algo(seed=4)
    zipsave.restore(fresh, url, component="learner", **options)
    assert same(fresh.learner.policy, algo.learner.policy)

    data, params, variables = zipsave.load_archive(url, **options)
    assert data == {"gamma": 0.9} and set(params) == set() and variables == {}

    info = zipsave.inspect(url, **options)
    assert "learner/policy.pth" in {m.name for m in info.members}

    weight = zipsave.read(url, "learner/policy/0.weight", **options)
    assert torch.equal(weight, algo.learner.policy[0].weight.detach())

    handle = algo.save(url, background=True, **options)
    handle.wait()
    assert same(zipsave.load(url, **options).learner.policy, algo.learner.policy)


# -- memory:// and file:// ----------------------------------------------------------------------
@pytest.fixture
def memory_url():
    fs = fsspec.filesystem("memory")
    folder = f"/zipsave-test-{uuid.uuid4().hex}"
    yield fs, folder
    with contextlib.suppress(FileNotFoundError):
        fs.rm(folder, recursive=True)


def test_memory_round_trip(memory_url):
    fs, folder = memory_url
    round_trip(f"memory://{folder}/run/algo.zip")
    assert fs.ls(f"{folder}/run", detail=False) == [f"{folder}/run/algo.zip"]  # no temporary left


def test_file_url_round_trip(tmp_path):
    round_trip(f"file://{tmp_path}/run/algo.zip")
    assert sorted(os.listdir(tmp_path / "run")) == ["algo.zip"]


def test_suffix_rules_apply_to_urls(memory_url):
    fs, folder = memory_url
    zipsave.save({"step": 1}, f"memory://{folder}/ckpt")
    assert fs.exists(f"{folder}/ckpt.zip")
    assert zipsave.load(f"memory://{folder}/ckpt") == {"step": 1}


def test_missing_object_is_named(memory_url):
    _, folder = memory_url
    url = f"memory://{folder}/nothing"
    with pytest.raises(
        zipsave.ZipsaveError, match=re.escape(f"archive `{url}`: no such object (also tried with a `.zip` suffix)")
    ):
        zipsave.load(url)


def test_failed_save_leaves_the_previous_object(memory_url):
    fs, folder = memory_url
    url = f"memory://{folder}/ckpt.zip"
    zipsave.save({"step": 1, "model": torch.nn.Linear(2, 2)}, url)
    before = fs.cat_file(f"{folder}/ckpt.zip")
    with pytest.raises(Exception, match="lambda"):
        zipsave.save({"step": 2, "model": torch.nn.Linear(2, 2), "bad": Unpicklable()}, url)
    assert fs.cat_file(f"{folder}/ckpt.zip") == before
    assert fs.ls(folder, detail=False) == [f"{folder}/ckpt.zip"]


def test_nothing_is_uploaded_when_writing_fails(memory_url):
    fs, folder = memory_url
    with pytest.raises(RuntimeError, match="boom"), _remote.remote_output(f"memory://{folder}/x.zip") as f:
        f.write(b"half an archive")
        raise RuntimeError("boom")
    assert not fs.exists(f"{folder}/x.zip")


def test_missing_filesystem_package_is_named():
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed")
    with pytest.raises(ImportError, match=re.escape("the URL `gs://bucket/x.zip` needs a filesystem package")):
        zipsave.save({"step": 1}, "gs://bucket/x.zip")
    with pytest.raises(zipsave.ZipsaveError, match="gcsfs"):
        zipsave.load("gs://bucket/x.zip")


def test_non_seekable_remote_file_is_downloaded(memory_url, monkeypatch):
    """Filesystems without range reads (plain HTTP servers) are spooled to a temporary file."""
    fs, folder = memory_url
    zipsave.save({"step": 5, "model": torch.nn.Linear(3, 3)}, f"memory://{folder}/a.zip")
    real_open = type(fs).open

    class Stream:
        def __init__(self, f):
            self._f = f
            self.size = f.size

        def read(self, n=-1):
            return self._f.read(n)

        def seekable(self):
            return False

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

    monkeypatch.setattr(type(fs), "open", lambda self, path, mode="rb", **kw: Stream(real_open(self, path, mode, **kw)))
    assert zipsave.load(f"memory://{folder}/a.zip")["step"] == 5


# -- S3 ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def s3():
    """A real S3-compatible server (moto's server mode) on 127.0.0.1, and a bucket on it."""
    if importlib.util.find_spec("s3fs") is None or importlib.util.find_spec("moto") is None:
        pytest.skip("s3fs and moto[server] are needed for the S3 tests")
    with moto_endpoint(endpoint_in_env=False) as endpoint:
        options = {"client_kwargs": {"endpoint_url": endpoint}, "skip_instance_cache": True}
        import s3fs

        fs = s3fs.S3FileSystem(**options)
        fs.mkdir("zipsave-test")
        yield fs, options, endpoint


def _keys(fs, prefix: str) -> list[str]:
    fs.invalidate_cache()
    return sorted(fs.find(prefix))


def test_s3_round_trip(s3):
    fs, options, _ = s3
    round_trip("s3://zipsave-test/run1/algo.zip", storage_options=options)
    assert _keys(fs, "zipsave-test/run1") == ["zipsave-test/run1/algo.zip"]


def test_s3_endpoint_from_the_environment(s3, monkeypatch):
    """Without storage_options, botocore's own configuration (here AWS_ENDPOINT_URL) is used."""
    import botocore

    if tuple(int(p) for p in botocore.__version__.split(".")[:3]) < (1, 31, 58):
        # The lowest stack: s3fs 2023.1 (fsspec's floor) needs botocore 1.27, before AWS_ENDPOINT_URL.
        pytest.skip(f"botocore {botocore.__version__} does not read AWS_ENDPOINT_URL (1.31.58 and later do)")
    _, _, endpoint = s3
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    zipsave.save({"step": 4}, "s3://zipsave-test/env/ckpt.zip", storage_options={"skip_instance_cache": True})
    assert zipsave.load("s3://zipsave-test/env/ckpt", storage_options={"skip_instance_cache": True}) == {"step": 4}


def test_s3_failed_save_leaves_the_previous_object(s3):
    fs, options, _ = s3
    url = "s3://zipsave-test/atomic/ckpt.zip"
    zipsave.save({"step": 1, "model": torch.nn.Linear(64, 64)}, url, storage_options=options)
    before = fs.cat_file("zipsave-test/atomic/ckpt.zip")
    with pytest.raises(Exception, match="lambda"):  # fails midway through writing the archive
        zipsave.save({"step": 2, "model": torch.nn.Linear(64, 64), "bad": Unpicklable()}, url, storage_options=options)
    handle = zipsave.save({"step": 3, "bad": Unpicklable()}, url, storage_options=options, background=True)
    assert handle.exception() is not None
    fs.invalidate_cache()
    assert fs.cat_file("zipsave-test/atomic/ckpt.zip") == before
    assert _keys(fs, "zipsave-test/atomic") == ["zipsave-test/atomic/ckpt.zip"]
    assert zipsave.load(url, storage_options=options)["step"] == 1


@pytest.mark.slow
def test_s3_multipart_upload(s3):
    """An archive above s3fs's multipart threshold (50 MiB) still appears whole."""
    _, options, _ = s3
    big = {"a": torch.randn(4096, 2048), "b": torch.randn(4096, 2048)}
    zipsave.save({"weights": _Holder(big)}, "s3://zipsave-test/big/ckpt.zip", storage_options=options)
    loaded = zipsave.load("s3://zipsave-test/big/ckpt.zip", storage_options=options)
    assert all(torch.equal(loaded["weights"][k], big[k]) for k in big)
    part = zipsave.read("s3://zipsave-test/big/ckpt.zip", "weights/b", storage_options=options)
    assert torch.equal(part, big["b"])


class _Holder:
    def __init__(self, tensors):
        self.tensors = tensors

    def state_dict(self):
        return self.tensors

    def load_state_dict(self, sd):
        self.tensors = sd
