"""Tests for zipsave._system_info: the system_info.txt member."""

from __future__ import annotations

import io
import platform
import re
import subprocess
import sys
from importlib import metadata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zipsave import _system_info
from zipsave._system_info import (
    compare_system_info,
    format_system_info,
    get_system_info,
    parse_system_info,
    print_system_info,
)
from zipsave._version import __version__

# Verbatim, as SB3 2.9.2's get_system_info formats it (a Debian host).
SB3_TEXT = (
    "- OS: Linux-6.1.0-26-amd64-x86_64-with-glibc2.36 # 1 SMP PREEMPT_DYNAMIC "
    "Debian 6.1.112-1 (2024-09-30)\n"
    "- Python: 3.10.12\n"
    "- Stable-Baselines3: 2.9.2\n"
    "- PyTorch: 2.5.1+cu124\n"
    "- GPU Enabled: True\n"
    "- Numpy: 1.26.4\n"
    "- Cloudpickle: 3.1.0\n"
    "- Gymnasium: 1.0.0\n"
)

SB3_INFO = {
    "OS": "Linux-6.1.0-26-amd64-x86_64-with-glibc2.36 # 1 SMP PREEMPT_DYNAMIC Debian 6.1.112-1 (2024-09-30)",
    "Python": "3.10.12",
    "Stable-Baselines3": "2.9.2",
    "PyTorch": "2.5.1+cu124",
    "GPU Enabled": "True",
    "Numpy": "1.26.4",
    "Cloudpickle": "3.1.0",
    "Gymnasium": "1.0.0",
}

CURRENT = {
    "OS": "Linux-6.18.44-x86_64-with-glibc2.36 # 1 SMP PREEMPT_DYNAMIC @0",
    "Python": "3.11.7",
    "zipsave": "0.2.0",
    "PyTorch": "2.13.0+cpu",
    "GPU Enabled": "False",
    "Numpy": "2.4.6",
    "Cloudpickle": "2.1.0",
    "Gymnasium": "1.4.0",
    "orjson": "3.8.3",
    "Stable-Baselines3": "2.9.2",
}


def test_get_system_info_keys_and_values():
    info = get_system_info()
    expected_order = [
        "OS",
        "Python",
        "zipsave",
        "PyTorch",
        "GPU Enabled",
        "Numpy",
        "Cloudpickle",
        "Gymnasium",
        "orjson",
        "Stable-Baselines3",
    ]
    assert list(info) == [key for key in expected_order if key in info]
    assert list(info)[:9] == expected_order[:9]  # all installed in the test environment
    assert all(isinstance(value, str) for value in info.values())
    assert info["Python"] == platform.python_version()
    assert info["zipsave"] == __version__
    assert info["GPU Enabled"] in {"True", "False"}
    assert info["OS"].startswith(platform.platform())
    assert re.search(r"#\d", info["OS"]) is None  # spaced out as SB3 does


def test_get_system_info_does_not_import_stable_baselines3():
    code = (
        "import sys; from zipsave._system_info import get_system_info; "
        "info = get_system_info(); "
        "assert 'stable_baselines3' not in sys.modules, 'imported SB3'; "
        "print(info.get('Stable-Baselines3'))"
    )
    result = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert result.stdout.strip() != ""


def test_format_is_sb3s():
    assert format_system_info({"Python": "3.11.7", "GPU Enabled": "False"}) == (
        "- Python: 3.11.7\n- GPU Enabled: False\n"
    )


def test_format_keeps_one_line_per_entry():
    text = format_system_info({"OS": "two\nlines", "Python": "3.11.7"})
    assert text == "- OS: two lines\n- Python: 3.11.7\n"


@pytest.mark.parametrize(
    "info",
    [CURRENT, SB3_INFO, {}, {"OS": "a: b: c # 1", "Empty": ""}],
    ids=["current", "sb3", "empty", "colons"],
)
def test_format_parse_round_trip(info):
    assert parse_system_info(format_system_info(info)) == info


def test_round_trip_of_this_machine():
    info = get_system_info()
    assert parse_system_info(format_system_info(info)) == info


def test_parse_verbatim_sb3_file():
    parsed = parse_system_info(SB3_TEXT)
    assert parsed == SB3_INFO
    assert list(parsed) == list(SB3_INFO)


def test_parse_what_installed_sb3_writes():
    utils = pytest.importorskip("stable_baselines3.common.utils")
    info, text = utils.get_system_info(print_info=False)
    assert parse_system_info(text) == info


# The pattern the lines were read with until a 100 KB line took 35 s: the reference for what a
# line means.
_OLD_LINE = r"\s*(?:-\s*)?([^:\s][^:]*?)\s*:\s?(.*)"


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.sampled_from(["-", " ", ":", "a", "\t", "b c", "\u3000", "\x85", "\n", "--", "\r", "# 1"]), max_size=14)
)
def test_lines_read_as_the_pattern_read_them(pieces):
    text = "".join(pieces)
    expected = {}
    for line in text.splitlines():
        match = re.fullmatch(_OLD_LINE, line)
        if match:
            expected[match.group(1)] = match.group(2).strip()
    assert parse_system_info(text) == expected


def test_long_line_without_colon_is_read_in_linear_time():
    # The lazy key of the pattern tried every split of a line of spaces with no colon: a 1 MiB
    # member (what is read of it) took hours. This size would not finish within the suite.
    assert parse_system_info("- a" + " " * 1_000_000 + "b\n- Python: 3.11\n") == {"Python": "3.11"}


def test_parse_is_tolerant():
    text = (
        "\ufeff- OS: Windows-10-10.0.19045-SP0 10.0.19045\r\n"
        "\n"
        "this line has no colon\n"
        "   - Python:   3.9.13   \r\n"
        "- Numpy: 1.24.0"  # no final newline
    )
    assert parse_system_info(text) == {
        "OS": "Windows-10-10.0.19045-SP0 10.0.19045",
        "Python": "3.9.13",
        "Numpy": "1.24.0",
    }


def test_compare_python_and_numpy_differ():
    assert compare_system_info({"Python": "3.10.12", "Numpy": "1.26.4"}, {"Python": "3.11.7", "Numpy": "2.4.6"}) == [
        ("Python differs: saved 3.10.12, current 3.11.7 (pickled functions and code objects may not load)"),
        ("Numpy differs: saved 1.26.4, current 2.4.6 (pickled numpy objects may not load across numpy major versions)"),
    ]


def test_compare_sb3_file_with_this_setup():
    assert [s.split(" differs")[0] for s in compare_system_info(SB3_INFO, CURRENT)] == [
        "Python",
        "Numpy",
        "PyTorch",
        "Gymnasium",
        "Cloudpickle",
    ]


@pytest.mark.parametrize(
    ("key", "saved", "current"),
    [
        ("PyTorch", "2.12.1", "2.13.0+cpu"),
        ("Gymnasium", "0.29.1", "1.4.0"),
        ("Cloudpickle", "2.2.1", "3.0.0"),
        ("Numpy", "dev", "2.4.6"),
    ],
)
def test_compare_reports(key, saved, current):
    (sentence,) = compare_system_info({key: saved}, {key: current})
    assert sentence.startswith(f"{key} differs: saved {saved}, current {current} (")


def test_compare_equal_is_empty():
    assert compare_system_info(CURRENT, dict(CURRENT)) == []


def test_compare_ignores_what_does_not_matter():
    saved = {
        "OS": "Windows",
        "Python": "3.11.2",
        "Numpy": "2.0.1",
        "PyTorch": "2.13.1+cu121",
        "GPU Enabled": "True",
        "Gymnasium": "1.4.2",
        "Cloudpickle": "2.0.0",
        "Stable-Baselines3": "2.0.0",
    }
    assert compare_system_info(saved, CURRENT) == []


def test_compare_missing_keys_are_not_differences():
    assert compare_system_info({"Python": "3.8.0"}, {"Numpy": "2.4.6"}) == []
    assert compare_system_info({}, CURRENT) == []


@pytest.fixture
def fixed_current(monkeypatch):
    monkeypatch.setattr(_system_info, "get_system_info", lambda: dict(CURRENT))


CURRENT_TEXT = (
    "- OS: Linux-6.18.44-x86_64-with-glibc2.36 # 1 SMP PREEMPT_DYNAMIC @0\n"
    "- Python: 3.11.7\n"
    "- zipsave: 0.2.0\n"
    "- PyTorch: 2.13.0+cpu\n"
    "- GPU Enabled: False\n"
    "- Numpy: 2.4.6\n"
    "- Cloudpickle: 2.1.0\n"
    "- Gymnasium: 1.4.0\n"
    "- orjson: 3.8.3\n"
    "- Stable-Baselines3: 2.9.2\n"
)


def test_print_with_saved_info(capsys, fixed_current):
    print_system_info(SB3_TEXT)
    assert capsys.readouterr().out == (
        "== SAVED MODEL SYSTEM INFO ==\n"
        + SB3_TEXT
        + "== CURRENT SYSTEM INFO ==\n"
        + CURRENT_TEXT
        + "== DIFFERENCES THAT MATTER ==\n"
        "- Python differs: saved 3.10.12, current 3.11.7 "
        "(pickled functions and code objects may not load)\n"
        "- Numpy differs: saved 1.26.4, current 2.4.6 "
        "(pickled numpy objects may not load across numpy major versions)\n"
        "- PyTorch differs: saved 2.5.1+cu124, current 2.13.0+cpu "
        "(tensors saved by a newer torch may not load, and results may differ)\n"
        "- Gymnasium differs: saved 1.0.0, current 1.4.0 "
        "(pickled spaces may not load, and environments may behave differently)\n"
        "- Cloudpickle differs: saved 3.1.0, current 2.1.0 (pickled functions may not load)\n"
    )


def test_print_same_machine(capsys, fixed_current):
    print_system_info(CURRENT_TEXT)
    out = capsys.readouterr().out
    assert out.endswith("== DIFFERENCES THAT MATTER ==\nnone\n")


def test_print_without_saved_info(capsys, fixed_current):
    print_system_info(None)
    assert capsys.readouterr().out == (
        "== SAVED MODEL SYSTEM INFO ==\n"
        "(the archive has no system_info.txt)\n"
        "== CURRENT SYSTEM INFO ==\n" + CURRENT_TEXT + "== DIFFERENCES THAT MATTER ==\nnone\n"
    )


def test_print_to_file(fixed_current, capsys):
    buffer = io.StringIO()
    print_system_info("", file=buffer)
    assert buffer.getvalue().startswith("== SAVED MODEL SYSTEM INFO ==\n(system_info.txt is empty)\n")
    assert capsys.readouterr().out == ""


def test_print_uses_the_real_current_info(capsys):
    print_system_info(None)
    assert format_system_info(get_system_info()) in capsys.readouterr().out


def test_versions_read_from_metadata_headers_are_what_importlib_metadata_says():
    """The header-only read of each distribution's metadata gives ``metadata.version``'s answer,
    for every distribution installed here (wheels, editable installs, egg-info)."""
    names = {dist.metadata["Name"] for dist in metadata.distributions()} - {None}
    assert len(names) > 20
    for name in sorted(names):
        assert _system_info._installed_version(name) == metadata.version(name), name


def test_a_missing_distribution_is_left_out():
    with pytest.raises(metadata.PackageNotFoundError):
        _system_info._installed_version("surely-not-installed-zipsave-probe")


# -- what a first save reads cheaply: the platform without `uname -p`, versions from folder names


def test_the_platform_is_platforms_without_asking_uname_for_the_processor(monkeypatch):
    processor = platform.processor()  # before the subprocess is refused below
    expected = platform.platform()
    monkeypatch.setattr(subprocess, "check_output", _refused)
    monkeypatch.setattr(subprocess, "run", _refused)
    monkeypatch.setattr(platform, "_uname_cache", None)  # as in a fresh process: nothing asked yet
    monkeypatch.setattr(platform, "_platform_cache", {})
    ours = _system_info._platform_text()
    if platform.system() != "Linux" or processor in ("", platform.machine()):
        assert ours == expected
    else:  # a distribution whose `uname -p` names the processor: the rest is the same
        assert ours == expected.replace(f"-{processor}", "", 1)


def _refused(*args, **kwargs):
    raise AssertionError(f"ran a subprocess: {args}")


def test_versions_come_from_folder_names_as_importlib_metadata_reads_them(tmp_path, monkeypatch):
    names = {"numpy", "cloudpickle", "gymnasium", "orjson", "stable_baselines3", "not_installed_anywhere"}
    listed = _system_info._listed_versions(names)
    assert listed is not None
    for name in names - {"not_installed_anywhere"}:
        assert listed[name] == metadata.version(name)
    assert listed["not_installed_anywhere"] is None
    # the first along sys.path wins, as in importlib.metadata; an egg-info or two versions side by
    # side leave the question to importlib.metadata
    (tmp_path / "first" / "numpy-0.0.1.dist-info").mkdir(parents=True)
    (tmp_path / "first" / "numpy-0.0.1.dist-info" / "METADATA").write_text("Name: numpy\nVersion: 0.0.1\n")
    for name in ("orjson-1.0.dist-info", "orjson-2.0.dist-info", "Cloudpickle.egg-info"):
        (tmp_path / "first" / name).mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path / "first"), *sys.path])
    listed = _system_info._listed_versions(names)
    assert listed is not None
    assert listed["numpy"] == "0.0.1" == metadata.version("numpy")
    assert listed["orjson"] == listed["cloudpickle"] == ""
    assert listed["gymnasium"] == metadata.version("gymnasium")


def test_a_folder_name_installers_do_not_write_leaves_every_version_to_importlib_metadata(tmp_path, monkeypatch):
    (tmp_path / "stable-baselines3-2.9.2.dist-info").mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert _system_info._listed_versions({"stable_baselines3"}) is None
    assert get_system_info()["Stable-Baselines3"] == metadata.version("stable-baselines3")


def test_an_unpacked_egg_along_the_path_gives_importlib_metadatas_version(tmp_path, monkeypatch):
    """An unpacked egg (``gymnasium-0.0.7-py3.11.egg/EGG-INFO``) is a distribution named by its
    folder, found before a later ``.dist-info``: the version is the egg's, as importlib.metadata
    says, not the one further along the path."""
    egg = tmp_path / "gymnasium-0.0.7-py3.11.egg"
    (egg / "EGG-INFO").mkdir(parents=True)
    (egg / "EGG-INFO" / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: gymnasium\nVersion: 0.0.7\n")
    monkeypatch.setattr(sys, "path", [str(egg), *sys.path])
    assert metadata.version("gymnasium") == "0.0.7"
    assert get_system_info()["Gymnasium"] == "0.0.7"
