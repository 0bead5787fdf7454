"""zipsave._distributions: the one listing of sys.path that the registry's entry points and
system_info.txt's versions read, and the one spelling of a distribution's name."""

from __future__ import annotations

import sys
from importlib import metadata

from hypothesis import given
from hypothesis import strategies as st

from zipsave._distributions import folder_parts, metadata_folders, normalized


@given(st.text(alphabet="aBz9-_.İ", max_size=8))
def test_names_are_normalized_as_importlib_metadata_normalizes_them(name):
    assert normalized(name) == metadata.Prepared.normalize(name)


def test_folder_parts():
    assert folder_parts("My.Pkg-1.0.dist-info") == ("My.Pkg", "1.0", "dist-info")
    assert folder_parts("legacy.egg-info") == ("legacy", "", "egg-info")
    assert folder_parts("flat-1.0-py3.11.egg-info") == ("flat", "1.0-py3.11", "egg-info")


def test_each_folder_is_listed_once_with_its_metadata_folders_only(tmp_path, monkeypatch):
    for child in ("a-1.0.dist-info", "B.EGG-INFO", "dist-info", "module.py"):
        (tmp_path / "site" / child).mkdir(parents=True)
    (tmp_path / "here" / "c-2.0.dist-info").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "here")
    site = str(tmp_path / "site")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing"), site, "", site, ""])
    folders = metadata_folders()
    assert folders is not None
    assert [(folder, sorted(names)) for folder, names in folders] == [
        (site, ["B.EGG-INFO", "a-1.0.dist-info"]),
        (".", ["c-2.0.dist-info"]),
    ]
