"""The registry lists handler entry points by reading each distribution's ``entry_points.txt``
(``zipsave._registry._scan_entry_points``) and must list what ``importlib.metadata`` lists."""

from __future__ import annotations

import pathlib
import sys
import tempfile
import zipfile
from importlib import metadata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _folder(root, folder: str, entry_points: str | None = None, *, name: str = "") -> None:
    """The metadata folder ``root/folder`` of a distribution called ``name`` (its folder's)."""
    path = root / folder
    path.mkdir(parents=True)
    meta = "PKG-INFO" if folder.lower().endswith(".egg-info") else "METADATA"
    (path / meta).write_text(f"Metadata-Version: 2.1\nName: {name or folder.partition('-')[0]}\nVersion: 1.0\n")
    if entry_points is not None:
        (path / "entry_points.txt").write_text(entry_points)


def _handler(name: str) -> str:
    return f"[{GROUP}]\n{name} = {name}_mod:handler\n"


def _scanned(monkeypatch, *entries) -> list[str]:
    """The names the scan lists with ``entries`` as ``sys.path``, checked against importlib.metadata."""
    monkeypatch.setattr(sys, "path", [str(entry) for entry in entries])
    found = _registry._scan_entry_points()
    assert found == _theirs()
    return [entry.name for entry in found]


def test_of_a_distribution_installed_twice_the_first_along_the_path_wins(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    _folder(first, "twice-2.0.dist-info", _handler("new"))
    _folder(second, "twice-1.0.dist-info", _handler("old"))
    _folder(second, "other-1.0.dist-info", _handler("other"))
    assert _scanned(monkeypatch, first, second) == ["new", "other"]
    assert _scanned(monkeypatch, second, first) == ["old", "other"]


def test_of_two_versions_in_one_folder_importlib_metadatas_choice_wins(tmp_path, monkeypatch):
    for version in ("1.0", "2.0", "10.0"):
        _folder(tmp_path, f"versions-{version}.dist-info", _handler(f"v{version.replace('.', '_')}"))
    assert len(_scanned(monkeypatch, tmp_path)) == 1


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ("My.Pkg-1.0.dist-info", "my_pkg-1.0.dist-info", True),
        ("MY__PKG-1.0.dist-info", "my.pkg-1.0.dist-info", True),
        ("my..pkg.dist-info", "My_Pkg-2.0.dist-info", True),
        ("my._-pkg-1.0.dist-info", "my_-1.0.dist-info", True),  # the name ends at the first '-'
        ("My_Pkg.egg-info", "my.pkg-1.0.dist-info", True),
        ("_pkg-1.0.dist-info", "pkg-1.0.dist-info", False),  # a leading separator stays
        ("pkg_-1.0.dist-info", "pkg-1.0.dist-info", False),
        ("pkg-1.0.dist-info", "pkg2-1.0.dist-info", False),
    ],
)
def test_names_that_differ_only_in_case_and_separators_are_one_distribution(tmp_path, monkeypatch, first, second, same):
    _folder(tmp_path / "a", first, _handler("first"))
    _folder(tmp_path / "b", second, _handler("second"))
    assert _scanned(monkeypatch, tmp_path / "a", tmp_path / "b") == (["first"] if same else ["first", "second"])
    # in one folder, importlib.metadata's order of the folder's listing decides
    _folder(tmp_path / "c", first, _handler("first"))
    _folder(tmp_path / "c", second, _handler("second"))
    assert len(_scanned(monkeypatch, tmp_path / "c")) == (1 if same else 2)


def test_egg_info_folders_and_files_are_distributions(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    _folder(first, "legacy.egg-info", _handler("legacy"))
    first.joinpath("flat-1.0-py3.11.egg-info").write_text("Metadata-Version: 1.1\nName: flat\nVersion: 1.0\n")
    _folder(second, "Legacy-2.0-py3.11.egg-info", _handler("shadowed"))
    _folder(second, "flat-2.0.dist-info", _handler("flat"))  # shadowed by the file above
    assert _scanned(monkeypatch, first, second) == ["legacy"]


def test_a_distribution_without_entry_points_still_shadows_a_later_one(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    _folder(first, "quiet-1.0.dist-info")
    _folder(second, "quiet-2.0.dist-info", _handler("loud"))
    _folder(second, "loud-1.0.dist-info", _handler("loud"))
    assert _scanned(monkeypatch, first, second) == ["loud"]


@pytest.mark.parametrize(
    "text",
    [
        "[console_scripts]\nzipsave.handlers = not_a:section\n",
        f"[{GROUP}.extra]\nextra = extra_mod:handler\n",
        f"# [{GROUP}]\n[other]\nname = mod:attr\n",
        f"[{GROUP}]\n",
        f"[ {GROUP} ]\nspaced = spaced_mod:handler\n",  # importlib.metadata keeps the spaces
        "",
    ],
)
def test_entry_points_of_other_groups_only_list_nothing(tmp_path, monkeypatch, text):
    _folder(tmp_path, "others-1.0.dist-info", text)
    assert _scanned(monkeypatch, tmp_path) == []


def test_a_section_header_is_read_as_importlib_metadata_reads_it(tmp_path, monkeypatch):
    _folder(tmp_path, "brackets-1.0.dist-info", f"[[{GROUP}]]\nbracketed = bracketed_mod:handler\n")
    assert _scanned(monkeypatch, tmp_path) == ["bracketed"]


@pytest.mark.parametrize(("open_at", "ask_at"), [(True, False), (False, True), (False, False)])
def test_where_files_cannot_be_opened_relative_to_a_folder_the_scan_lists_the_same(
    tmp_path, monkeypatch, open_at, ask_at
):
    monkeypatch.setattr(_registry, "_OPEN_AT", open_at)
    monkeypatch.setattr(_registry, "_ASK_AT", ask_at)
    _folder(tmp_path / "a", "quiet-1.0.dist-info")
    _folder(tmp_path / "a", "loud-1.0.dist-info", _handler("loud"))
    _folder(tmp_path / "b", "quiet-2.0.dist-info", _handler("quiet"))
    assert _scanned(monkeypatch, tmp_path / "a", tmp_path / "b") == ["loud"]


def test_missing_repeated_and_empty_path_entries(tmp_path, monkeypatch):
    _folder(tmp_path / "a", "here-1.0.dist-info", _handler("here"))
    _folder(tmp_path / "b", "there-1.0.dist-info", _handler("there"))
    monkeypatch.chdir(tmp_path / "a")
    assert _scanned(monkeypatch, tmp_path / "missing", "", tmp_path / "a", tmp_path / "b", "", tmp_path / "b") == [
        "here",
        "there",
    ]


@pytest.mark.parametrize(
    "layout",
    [
        "Odd-1.0.DIST-INFO",  # importlib.metadata names it by its METADATA
        "-1.0.dist-info",  # no name before the version
        "..dist-info",
        "unpacked-1.0.egg/EGG-INFO",  # an unpacked egg on sys.path, named by its PKG-INFO
        "bytes",
        "finder",
    ],
)
def test_where_the_folder_does_not_name_the_distribution_importlib_metadata_is_asked(tmp_path, monkeypatch, layout):
    entries: list = [str(tmp_path)]
    if layout == "bytes":
        entries.append(bytes(tmp_path))
    elif layout == "finder":
        monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, metadata.MetadataPathFinder])
    elif layout.endswith("EGG-INFO"):
        _folder(tmp_path, layout, _handler("egg"), name="unpacked")
        entries.append(str(tmp_path / layout.partition("/")[0]))
    else:
        _folder(tmp_path, layout, _handler("odd"), name="Other")
    monkeypatch.setattr(sys, "path", entries)
    assert _registry._scan_entry_points() is None


#: Distribution names, mostly as a folder names them (the scan's other cases are above).
_NAMES = st.builds(str.__add__, st.sampled_from("aB_."), st.text(alphabet="aB-_.", max_size=3))
_DISTS = st.lists(
    st.tuples(_NAMES, st.sampled_from(["", "-1.0", "-2"]), st.sampled_from([".dist-info", ".egg-info"]), st.booleans()),
    max_size=5,
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_DISTS, min_size=1, max_size=3))
def test_any_layout_lists_what_importlib_metadata_lists_or_leaves_it_the_question(layout):
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        roots = [pathlib.Path(tmp, str(i)) for i in range(len(layout))]
        for n, (root, dists) in enumerate(zip(roots, layout)):
            root.mkdir()
            for i, (name, version, suffix, has_entry_points) in enumerate(dists):
                if not root.joinpath(name + version + suffix).exists():
                    _folder(
                        root, name + version + suffix, _handler(f"e{n}_{i}") if has_entry_points else None, name="x"
                    )
        monkeypatch.setattr(sys, "path", [str(root) for root in roots])
        found = _registry._scan_entry_points()
        assert found is None or found == _theirs()
