"""The default trust policy is built when a load first needs it (a pickled value, an import
path), not up front; what the caller passes is still built and checked before the archive opens,
and the policy a load enforces is the same either way."""

import collections
import os

import pytest
import torch

import zipsave
from zipsave import UnsafeGlobalError
from zipsave._core import LoadOptions
from zipsave._trust import TrustPolicy


class _Opaque:
    """A class no allowlist names: saved as a pickle in ``data``."""

    def __init__(self, value):
        self.value = value


def test_the_default_policy_is_built_on_first_use_and_is_the_plain_one():
    options = LoadOptions()
    assert object.__getattribute__(options, "_policy") is None
    policy = options.policy
    assert policy == TrustPolicy.make(allow_pickle=False, trusted=())
    assert options.policy is policy  # built once


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"trusted": ["not a name"]}, ValueError, "is not a global name"),
        ({"trusted": [3]}, TypeError, "must be names, classes"),
        ({"allow_pickle": None}, TypeError, "must be True or False"),
        ({"allow_pickle": 0}, TypeError, "must be True or False"),
    ],
)
def test_what_the_caller_passes_is_checked_before_the_archive_is_opened(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        LoadOptions(**kwargs)
    missing = os.fspath(tmp_path / "missing.zip")  # the option is refused, not the path
    with pytest.raises(error, match=match):
        zipsave.load(missing, **kwargs)


@pytest.mark.parametrize("trusted", [[], (), None])
def test_empty_trusted_lists_behave_as_the_default(trusted):
    kwargs = {} if trusted is None else {"trusted": trusted}
    assert LoadOptions(**kwargs).policy == TrustPolicy.make(allow_pickle=False, trusted=())


def test_a_lazily_built_policy_still_refuses_an_unlisted_global(tmp_path):
    path = os.fspath(tmp_path / "opaque.zip")
    zipsave.save({"model": torch.nn.Linear(2, 2), "thing": _Opaque(3), "n": 4}, path)
    with pytest.raises(UnsafeGlobalError, match="_Opaque"):
        zipsave.load(path, strict=True)
    with pytest.warns(zipsave.SkippedEntryWarning, match="thing"):
        loaded = zipsave.load(path)
    assert "thing" not in loaded and loaded["n"] == 4
    trusted = zipsave.load(path, trusted=[f"{__name__}._Opaque"], strict=True)
    assert isinstance(trusted["thing"], _Opaque) and trusted["thing"].value == 3


def test_a_decoder_given_a_policy_function_asks_it_once():
    from zipsave._codec import Decoder

    calls = collections.Counter()

    def policy():
        calls["asked"] += 1
        return TrustPolicy.make(allow_pickle=False, trusted=())

    decoder = Decoder(policy)
    assert decoder.decode_entry("x", [1, {"a": 2}]) == [1, {"a": 2}]
    assert calls["asked"] == 0  # plain values need no policy
    assert decoder.policy is decoder.policy
    assert calls["asked"] == 1
