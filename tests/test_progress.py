"""progress=True: tqdm bars for saves, loads and uploads; silent by default."""

from __future__ import annotations

import re
import sys
import uuid

import pytest
import torch

import zipsave

pytest.importorskip("tqdm")


def app_state():
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256)
    return {"model": model, "optim": torch.optim.Adam(model.parameters()), "step": 3}


def test_silent_by_default(tmp_path, capfd):
    zipsave.save(app_state(), tmp_path / "a.zip")
    zipsave.load(tmp_path / "a.zip")
    zipsave.restore(app_state(), tmp_path / "a.zip")
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_bars_for_save_load_and_restore(tmp_path, capsys):
    path = tmp_path / "a.zip"
    zipsave.save(app_state(), path, progress=True)
    err = capsys.readouterr().err
    assert f"zipsave save {path}" in err and "100%" in err

    loaded = zipsave.load(path, progress=True)
    assert loaded["step"] == 3
    assert f"zipsave load {path}" in capsys.readouterr().err

    zipsave.restore(app_state(), path, progress=True)
    assert f"zipsave load {path}" in capsys.readouterr().err
    zipsave.load_archive(path, progress=True)
    assert f"zipsave load {path}" in capsys.readouterr().err


def test_progress_changes_no_byte(tmp_path, capsys):
    zipsave.save(app_state(), tmp_path / "quiet.zip")
    zipsave.save(app_state(), tmp_path / "bar.zip", progress=True)
    zipsave.save(app_state(), tmp_path / "bg.zip", progress=True, background=True).wait()
    assert (tmp_path / "bar.zip").read_bytes() == (tmp_path / "quiet.zip").read_bytes()
    assert (tmp_path / "bg.zip").read_bytes() == (tmp_path / "quiet.zip").read_bytes()
    capsys.readouterr()


def test_upload_bar_for_remote_storage(capsys):
    pytest.importorskip("fsspec")
    url = f"memory://zipsave-progress-{uuid.uuid4().hex}/a.zip"
    zipsave.save(app_state(), url, progress=True)
    err = capsys.readouterr().err
    assert f"zipsave save {url}" in err and f"zipsave upload {url}" in err
    assert zipsave.load(url, progress=True)["step"] == 3


def test_missing_tqdm_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # what an environment without tqdm shows
    message = re.escape("`progress=True` needs `tqdm`, which is not installed")
    with pytest.raises(ImportError, match=message):
        zipsave.save(app_state(), tmp_path / "a.zip", progress=True)
    assert not (tmp_path / "a.zip").exists()  # checked before a byte is written
    zipsave.save(app_state(), tmp_path / "a.zip")  # without a bar, tqdm is not needed
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("pip install zipsave[progress]")):
        zipsave.load(tmp_path / "a.zip", progress=True)
