"""The hand-made hostile archives of tests/data/hostile: each is a clear ZipsaveError or a skip
with a warning, never a hang, another exception, a large allocation, a side effect or a file
written anywhere."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import pytest

import zipsave
from zipsave._tools import verify

CORPUS = Path(__file__).resolve().parent / "data" / "hostile"
# Always named; `trusted=` is named too, with a caution for globals that run code.
OPT_INS = ("custom_objects={'evil': ...}", "allow_pickle=True")


def _load_maker():
    spec = importlib.util.spec_from_file_location("make_hostile", CORPUS / "make_hostile.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_hostile"] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["make_hostile"]
    return module


# What each archive must do under the default load. ("raise", type, message) or
# ("skip", {skipped member/key: message}, keys that still load).
RAISES = {
    "absolute.zip": (
        zipsave.ArchiveFormatError,
        "member `/tmp/evil.txt`: unsafe member name (absolute, drive-qualified or containing `..`).",
    ),
    "backslash.zip": (zipsave.ArchiveFormatError, "member `..\\evil.txt`: unsafe member name"),
    "dotdot.zip": (zipsave.ArchiveFormatError, "member `../evil.txt`: unsafe member name"),
    "drive.zip": (zipsave.ArchiveFormatError, "member `C:/evil.txt`: unsafe member name"),
    "duplicate.zip": (
        zipsave.ArchiveFormatError,
        "member `data`: appears twice in the archive; refusing to guess which copy is meant.",
    ),
    "bomb_declared_huge.zip": (
        zipsave.ArchiveLimitError,
        "member `data`: declares 2199023255552 bytes; the limit is 1099511627776.",
    ),
    "bomb_ratio.zip": (
        zipsave.ArchiveLimitError,
        "member `data`: expands 1029x when decompressed; the limit is 200x (zip bomb?).",
    ),
    "data_1gb.zip": (
        zipsave.ArchiveLimitError,
        "member `data`: is 1073741824 bytes; the limit for this member is 536870912.",
    ),
    "declared_too_small.zip": (
        zipsave.ArchiveFormatError,
        "member `data`: cannot be read (inflates past its declared 10 bytes).",
    ),
    "stored_size_lie.zip": (
        zipsave.ArchiveFormatError,
        "member `data`: is stored but declares 46 compressed and 10 uncompressed bytes.",
    ),
    "overlap.zip": (
        zipsave.ArchiveFormatError,
        "member `data`: overlaps member `data2` (a zip bomb, or a forged directory).",
    ),
    "encrypted.zip": (
        zipsave.ArchiveFormatError,
        "member `data`: is encrypted; zipsave does not read encrypted members.",
    ),
    "bzip2.zip": (
        zipsave.ArchiveFormatError,
        "member `data`: uses compression method 12; expected stored (0) or deflated (8).",
    ),
    "deep_json.zip": (
        zipsave.DecodeError,
        "member `data`: JSON nests deeper than 500 levels (limit `max_json_depth`).",
    ),
    "deep_json_object.zip": (
        zipsave.DecodeError,
        "member `data`: JSON nests deeper than 500 levels (limit `max_json_depth`).",
    ),
    "data_not_object.zip": (zipsave.ArchiveFormatError, "member `data`: must hold a JSON object, found list."),
    "not_json.zip": (zipsave.DecodeError, "member `data`: not valid JSON: 'utf-8' codec can't decode byte 0xff"),
    "truncated.zip": (zipsave.ArchiveFormatError, "not a zip archive, or truncated"),
    "not_a_zip.zip": (zipsave.ArchiveFormatError, "not a zip archive, or truncated (File is not a zip file)."),
    "empty.zip": (zipsave.ArchiveFormatError, "not a zip archive, or truncated (File is not a zip file)."),
    "init_os_system.zip": (
        zipsave.UnsafeGlobalError,
        "member `init.json`: refusing to import untrusted global `os.system`. Only zipsave.Saveable subclasses are built from init.json",
    ),
    "init_popen.zip": (
        zipsave.UnsafeGlobalError,
        "member `init.json`: refusing to import untrusted global `subprocess.Popen`. Only zipsave.Saveable subclasses are built from init.json",
    ),
}

_REFUSED = "refusing to import untrusted global `{}`."
SKIPS = {
    "pickle_os_system.zip": ({"evil": _REFUSED.format("posix.system")}, ["learning_rate", "n_steps"]),
    "pickle_file_write.zip": ({"evil": _REFUSED.format("io.open")}, ["learning_rate", "n_steps"]),
    # getattr is a guarded stand-in; the chain getattr(__import__("os"), "system") stops at __import__
    "pickle_getattr.zip": ({"evil": _REFUSED.format("builtins.__import__")}, ["learning_rate", "n_steps"]),
    "pickle_subprocess.zip": ({"evil": _REFUSED.format("subprocess.Popen")}, ["learning_rate", "n_steps"]),
    "pickle_eval.zip": ({"evil": _REFUSED.format("builtins.eval")}, ["learning_rate", "n_steps"]),
    "ref_os_system.zip": ({"evil": _REFUSED.format("os.system")}, ["learning_rate", "n_steps"]),
    "ref_eval.zip": ({"evil": _REFUSED.format("builtins.eval")}, ["learning_rate", "n_steps"]),
    "namedtuple_os_system.zip": ({"evil": _REFUSED.format("os.system")}, ["learning_rate", "n_steps"]),
    "enum_os_system.zip": ({"evil": _REFUSED.format("os.system")}, ["learning_rate", "n_steps"]),
    "defaultdict_eval.zip": ({"evil": _REFUSED.format("builtins.eval")}, ["learning_rate", "n_steps"]),
}
# Broken tensor members: an IntegrityError by default (never a wrong model); with
# skip_broken_tensors=True: (skipped member/key: message, keys that still load).
BROKEN = {
    "npy_huge_shape.zip": (
        "member `arrays/0.npy`: is corrupt or unreadable (array member `arrays/0.npy` declares float32[1000000000000]",
        {
            "arr": "array member `arrays/0.npy` declares float32[1000000000000] (4000000000000 bytes) but holds 24 bytes of data."
        },
        ["learning_rate", "n_steps"],
    ),
    "mismatch_pth.zip": (
        "member `policy.pth`: differs from manifest.json: size 1893 / crc32 69921db4, expected size 1893 / crc32 03fdedbb.",
        {"policy.pth": "differs from manifest.json: size 1893 / crc32 69921db4, expected size 1893 / crc32 03fdedbb."},
        ["arr", "learning_rate", "n_steps"],
    ),
    "crc_mismatch_pth.zip": (
        "member `policy.pth`: differs from manifest.json",
        {"policy.pth": "differs from manifest.json"},
        ["learning_rate", "n_steps"],
    ),
    "mismatch_npy.zip": (
        "member `arrays/0.npy`: differs from manifest.json",
        {"arr": "array member `arrays/0.npy`: differs from manifest.json"},
        ["learning_rate", "n_steps", "policy"],
    ),
    "unlisted_member.zip": (
        "member `extra.pth`: is not listed in manifest.json (added after saving?).",
        {"extra.pth": "is not listed in manifest.json (added after saving?)."},
        ["learning_rate", "n_steps"],
    ),
}
LOADS = {"valid.zip": ["arr", "learning_rate", "n_steps", "policy"]}


def test_every_archive_in_the_corpus_has_an_expectation():
    on_disk = {p.name for p in CORPUS.glob("*.zip")}
    expected = set(RAISES) | set(SKIPS) | set(BROKEN) | set(LOADS) | {"edited_data.zip"}
    assert on_disk == expected


def test_corpus_matches_its_script(tmp_path):
    _load_maker().main(tmp_path)
    for path in sorted(tmp_path.iterdir()):
        assert path.read_bytes() == (CORPUS / path.name).read_bytes(), path.name


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """Load from inside an empty folder; afterwards nothing may have appeared in it, and the
    load must have been quick and small. Quick in CPU seconds (this process's threads): a bomb
    or a quadratic parse spends them, while a loaded CI machine only stretches the wall clock."""
    monkeypatch.chdir(tmp_path)
    tracemalloc.start()
    start = time.process_time()
    yield tmp_path
    spent = time.process_time() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert list(tmp_path.iterdir()) == [], "the archive made something happen on disk"
    assert spent < 10, f"took {spent:.1f} s of CPU"
    assert peak < 64 << 20, f"allocated {peak >> 20} MiB"


@pytest.mark.parametrize("name", sorted(RAISES))
def test_hostile_archive_is_a_clear_error(name, sandbox):
    kind, message = RAISES[name]
    with pytest.raises(kind, match=re.escape(message)) as err:
        zipsave.load(CORPUS / name)
    assert f"archive `{CORPUS / name}`" in str(err.value)


@pytest.mark.parametrize("name", sorted(SKIPS))
def test_hostile_entry_is_skipped_with_a_warning(name, sandbox):
    skipped, loaded = SKIPS[name]
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.SkippedEntryWarning) as caught:
        result = zipsave.load(CORPUS / name, report=report)
    assert sorted(result) == loaded
    assert len(caught) == len(skipped) == len(report.skipped)
    for warning, entry in zip(caught, report.skipped):
        what = entry.key if entry.key is not None else entry.member
        assert skipped[what] in str(warning.message)
        assert what in str(warning.message)


@pytest.mark.parametrize(
    "name", sorted(n for n in SKIPS if n.startswith(("pickle_", "ref_", "namedtuple_", "enum_", "defaultdict_")))
)
def test_refusal_names_the_ways_to_opt_in(name, sandbox):
    with pytest.warns(zipsave.SkippedEntryWarning) as caught:
        zipsave.load(CORPUS / name)
    text = str(caught[0].message)
    assert "key `evil`" in text
    for opt_in in OPT_INS:
        assert opt_in in text


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_tensor_member_is_an_integrity_error(name, sandbox):
    message, _, _ = BROKEN[name]
    with pytest.raises(zipsave.IntegrityError, match=re.escape(message)) as err:
        zipsave.load(CORPUS / name)
    assert f"archive `{CORPUS / name}`" in str(err.value)
    assert err.value.expected and err.value.found and err.value.expected in str(err.value)
    assert "`skip_broken_tensors=True`" in str(err.value) and "`exclude=[" in str(err.value)
    with pytest.raises(zipsave.IntegrityError, match=re.escape(message)):
        zipsave.load(CORPUS / name, strict=True)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_skip_broken_tensors_skips_them_with_a_warning(name, sandbox):
    _, skipped, loaded = BROKEN[name]
    report = zipsave.LoadReport()
    with pytest.warns(zipsave.SkippedEntryWarning) as caught:
        result = zipsave.load(CORPUS / name, report=report, skip_broken_tensors=True)
    assert sorted(result) == loaded
    assert len(caught) == len(skipped) == len(report.skipped)
    for warning, entry in zip(caught, report.skipped):
        what = entry.key if entry.key is not None else entry.member
        assert skipped[what] in str(warning.message)


@pytest.mark.parametrize("name", ["mismatch_pth.zip", "mismatch_npy.zip"])
def test_a_broken_tensor_member_left_out_is_not_an_error(name, sandbox):
    leave_out = "policy" if "pth" in name else "arr"
    result = zipsave.load(CORPUS / name, exclude=[leave_out])
    assert leave_out not in result and "learning_rate" in result


def test_edited_data_is_reported_then_decoded(sandbox):
    with pytest.warns(zipsave.ZipsaveWarning, match=re.escape("member `data` differs from manifest.json")) as caught:
        result = zipsave.load(CORPUS / "edited_data.zip")
    assert "It was edited after saving; decoding it key by key." in str(caught[0].message)
    assert result["n_steps"] == 32  # the edit is what loads
    with pytest.raises(zipsave.IntegrityError, match=re.escape("member `data`: differs from manifest.json")):
        zipsave.load(CORPUS / "edited_data.zip", strict=True)


def test_valid_archive_loads(sandbox):
    import numpy as np

    result = zipsave.load(CORPUS / "valid.zip")
    assert sorted(result) == LOADS["valid.zip"]
    np.testing.assert_array_equal(result["arr"], np.arange(6, dtype=np.float32))
    assert set(result["policy"]) == {"weight", "bias"}


def test_limits_are_configurable(tmp_path, monkeypatch):
    # No `sandbox` memory bound here: with the limits raised on purpose, an honest 20 MiB
    # member is decoded, and how much a JSON parser allocates for it depends on its version
    # (orjson 3.13 takes about 13x the text for this run of spaces).
    monkeypatch.chdir(tmp_path)
    # The ratio bomb is an honest 20 MiB of spaces: with the limit raised it decodes.
    assert zipsave.load(CORPUS / "bomb_ratio.zip", limits=zipsave.Limits(max_compression_ratio=2000)) == {}
    with pytest.raises(
        zipsave.ArchiveLimitError,
        match=re.escape("member `data`: is 20971522 bytes; the limit for this member is 1048576."),
    ):
        zipsave.load(
            CORPUS / "bomb_ratio.zip", limits=zipsave.Limits(max_json_bytes=1 << 20, max_compression_ratio=2000)
        )
    with pytest.raises(zipsave.ArchiveLimitError, match=re.escape("archive `")):
        zipsave.load(CORPUS / "valid.zip", limits=zipsave.Limits(max_members=2))
    # Raised past what Python can parse, the depth limit still ends in a clean error.
    with pytest.raises(
        zipsave.DecodeError, match=re.escape("member `data`: JSON is nested more deeply than Python can parse")
    ):
        zipsave.load(CORPUS / "deep_json_object.zip", limits=zipsave.Limits(max_json_depth=10**6))


def test_trusting_os_system_still_never_calls_it_from_a_namedtuple_form(sandbox):
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("`os:system` is not a namedtuple class.")):
        zipsave.load(CORPUS / "namedtuple_os_system.zip", trusted=["os.system"])
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("`os:system` is not an Enum class.")):
        zipsave.load(CORPUS / "enum_os_system.zip", trusted=["os.system"])


@pytest.mark.parametrize("name", ["init_os_system.zip", "init_popen.zip"])
def test_init_class_is_refused_even_when_trusted(name, sandbox):
    with pytest.raises(
        zipsave.UnsafeGlobalError, match=re.escape("Only zipsave.Saveable subclasses are built from init.json")
    ):
        zipsave.load(CORPUS / name, trusted=["os.system", "subprocess.Popen"])


@pytest.mark.parametrize("name", sorted(set(RAISES) | set(SKIPS) | set(LOADS) | {"edited_data.zip"}))
def test_load_archive_and_verify_behave_the_same(name, sandbox):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zipsave.ZipsaveWarning)
        try:
            zipsave.load_archive(CORPUS / name)
        except zipsave.ZipsaveError:
            pass
    problems = verify(CORPUS / name)
    intact = {
        "valid.zip",
        "data_not_object.zip",
        "deep_json.zip",
        "deep_json_object.zip",
        "not_json.zip",
        "npy_huge_shape.zip",
        "init_os_system.zip",
        "init_popen.zip",
    } | {n for n in SKIPS if n.startswith(("pickle_", "ref_", "namedtuple_", "enum_", "defaultdict_"))}
    assert (problems == []) == (name in intact), problems


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("mismatch_pth.zip", "member `policy.pth`: CRC-32 69921db4 differs from manifest.json's 03fdedbb."),
        ("mismatch_npy.zip", "member `arrays/0.npy`: SHA-256 "),
        ("edited_data.zip", "member `data`: SHA-256 "),
        ("crc_mismatch_pth.zip", "member `policy.pth`: CRC-32 69921db4 differs from the zip directory's 03fdedbb."),
        ("unlisted_member.zip", "member `extra.pth` is not listed in manifest.json (added after saving?)."),
        ("overlap.zip", "member `data`: overlaps member `data2`"),
        ("truncated.zip", "not a zip archive, or truncated"),
        ("declared_too_small.zip", "member `data`: cannot be inflated (inflates past its declared 10 bytes)."),
    ],
)
def test_verify_names_the_member(name, problem, sandbox):
    assert any(problem in p for p in verify(CORPUS / name)), verify(CORPUS / name)


def test_nothing_is_extracted_anywhere(sandbox):
    for name in ("dotdot.zip", "absolute.zip", "drive.zip", "backslash.zip"):
        with pytest.raises(zipsave.ArchiveFormatError):
            zipsave.load(CORPUS / name)
    assert not os.path.exists("/tmp/evil.txt")
    assert not (CORPUS.parent / "evil.txt").exists()
