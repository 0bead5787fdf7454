"""The registry lists handler entry points by reading each distribution's ``entry_points.txt``
(``zipsave._registry._scan_entry_points``) and must list what ``importlib.metadata`` lists."""

from __future__ import annotations

import sys
import zipfile
from importlib import metadata

import pytest

from zipsave import _registry

GROUP = _registry.ENTRY_POINT_GROUP


def _dist(root, name: str, text: str) -> None:
    folder = root / f"{name}-1.0.dist-info"
    folder.mkdir(parents=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (folder / "entry_points.txt").write_text(text)


def _theirs() -> list:
    return list(metadata.entry_points(group=GROUP))


def test_the_scan_lists_what_importlib_metadata_lists():
    assert _registry._scan_entry_points() == _theirs()


def test_a_third_party_handler_is_found_and_the_first_distribution_of_a_name_wins(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    _dist(first, "fake_handlers", f"[console_scripts]\nx = y:z\n\n[{GROUP}]\n# a comment\nfake = fake_mod:handler\n")
    _dist(second, "Fake.Handlers", f"[{GROUP}]\nshadowed = other_mod:handler\n")  # the same name, normalized
    _dist(second, "no_group", "[console_scripts]\nzipsave.handlers = not_a:section\n")
    monkeypatch.setattr(sys, "path", [str(first), str(second), *sys.path])
    found = _registry._scan_entry_points()
    assert found == _theirs()
    assert [(e.name, e.value) for e in found if e.name in ("fake", "shadowed")] == [("fake", "fake_mod:handler")]


def test_a_zip_on_the_path_leaves_the_listing_to_importlib_metadata(tmp_path, monkeypatch):
    archive = tmp_path / "packages.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zipped-1.0.dist-info/entry_points.txt", f"[{GROUP}]\nzipped = zipped_mod:handler\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(archive)])
    assert _registry._scan_entry_points() is None


@pytest.mark.parametrize("text", ["", "[other]\na = b:c\n", f"[{GROUP}]\n\n; comment\nname=mod:attr\n"])
def test_group_entries_reads_only_the_group(text):
    entries = _registry._group_entries(text)
    assert [(e.name, e.value, e.group) for e in entries] == ([("name", "mod:attr", GROUP)] if GROUP in text else [])
