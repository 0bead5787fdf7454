"""What ``path`` may be for every verb (``_archive._destination``): a file object must be open in
binary mode, and one open in text mode is named as such, before anything is read or written."""

from __future__ import annotations

import io
import re

import pytest
import torch

import zipsave


def _saved(tmp_path):
    path = tmp_path / "state.zip"
    zipsave.save({"model": torch.nn.Linear(2, 2), "step": 3}, path)
    return path


def test_a_file_open_in_text_mode_is_refused_on_load(tmp_path):
    # it read as "not a zip archive, or truncated": the archive was whole
    path = _saved(tmp_path)
    with open(path) as text:
        with pytest.raises(TypeError, match=re.escape(f"`{path}` is open in text mode (mode 'r')")) as caught:
            zipsave.load(text)
        assert "open(path, 'rb')" in str(caught.value)
        assert isinstance(caught.value, zipsave.UsageError)  # zipsave's own, and still a TypeError
        with pytest.raises(TypeError, match=re.escape("open in text mode")):
            zipsave.inspect(text)
    with pytest.raises(TypeError, match=re.escape("`<StringIO>` is open in text mode")):
        zipsave.load_archive(io.StringIO("PK"))


@pytest.mark.parametrize("background", [False, True])
def test_a_file_open_in_text_mode_is_refused_on_save(tmp_path, background):
    # save wrote into it until the first bytes: "write() argument must be str, not memoryview"
    with open(tmp_path / "out.zip", "w") as text:
        with pytest.raises(TypeError, match=re.escape("is open in text mode (mode 'w')")) as caught:
            zipsave.save({"step": 3}, text, background=background)
        assert "open(path, 'wb')" in str(caught.value)
        assert isinstance(caught.value, zipsave.UsageError)
    assert (tmp_path / "out.zip").read_bytes() == b""


def test_sb3_load_under_install_names_a_text_mode_file_too(tmp_path):
    # the door wrapped the TypeError: "PPO.load failed on this file's values ... (damaged, another
    # model or environment, or made to break readers)"
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import PPO

    import zipsave.sb3

    PPO("MlpPolicy", "CartPole-v1", n_steps=8, batch_size=8, policy_kwargs={"net_arch": [4]}).save(tmp_path / "ppo.zip")
    with zipsave.sb3.installed(), open(tmp_path / "ppo.zip") as text:
        with pytest.raises(TypeError, match=re.escape("is open in text mode (mode 'r')")):
            PPO.load(text)
