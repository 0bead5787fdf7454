"""Each row of docs/security.rst's table of refusals (``.. _security-refusals:``), run: the archive
the row describes is made, loaded by default (and with ``strict=True`` where the row says), and
the warning or error class is the one the row names."""

from __future__ import annotations

import json
import os
import re
import struct
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import zipsave

PAGE = Path(__file__).resolve().parent.parent / "docs" / "security.rst"


def _rows() -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    table = text[text.index(".. _security-refusals:") :]
    table = table[table.index(".. list-table::") : table.index("\nThreat model\n")]
    rows = re.findall(r"^   \* - (.*?)\n     - (.*?)(?=\n   \* - |\Z)", table, flags=re.S | re.M)
    return [(" ".join(a.split()), " ".join(b.split())) for a, b in rows[1:]]


def _rewrite(src: Path, dst: Path, edit: Callable[[str, bytes], bytes], extra: tuple = ()) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, edit(info.filename, zin.read(info)))
        for name, data in extra:
            zout.writestr(name, data)
    return dst


class _Hostile:
    def __reduce__(self):
        return os.system, ("echo pwned > PWNED",)


class _Model(zipsave.Saveable):
    def __init__(self, a=1):
        self.a = a


def _outcome(load: Callable[[], object]) -> set[str]:
    """The names of the classes of what ``load`` warned and raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            load()
            raised = set()
        except zipsave.ZipsaveError as err:
            raised = {type(err).__name__}
    return raised | {type(w.message).__name__ for w in caught if isinstance(w.message, zipsave.ZipsaveWarning)}


def _model(tmp_path: Path) -> Path:
    zipsave.save({"policy": torch.nn.Linear(2, 2), "x": 1}, tmp_path / "m.zip")
    return tmp_path / "m.zip"


def _pickled(tmp_path: Path) -> dict[str, set[str]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zipsave.ZipsaveWarning)
        zipsave.save({"lr": 1.0, "evil": _Hostile()}, tmp_path / "h.zip")
    out = {"default": _outcome(lambda: zipsave.load(tmp_path / "h.zip"))}
    out["strict"] = _outcome(lambda: zipsave.load(tmp_path / "h.zip", strict=True))
    assert not (tmp_path / "PWNED").exists()
    return out


def _reference(tmp_path: Path) -> dict[str, set[str]]:
    def edit(name: str, data: bytes) -> bytes:
        if name != "data":
            return data
        values = json.loads(data)
        values["x"] = {":zipsave:": {"kind": "ref", "path": "os:system"}}
        return json.dumps(values).encode()

    archive = _rewrite(_model(tmp_path), tmp_path / "ref.zip", edit)
    return {"default": _outcome(lambda: zipsave.load(archive))}


def _init_json(tmp_path: Path) -> dict[str, set[str]]:
    _Model().save(tmp_path / "s.zip")

    def edit(name: str, data: bytes) -> bytes:
        return json.dumps({**json.loads(data), "class": "os:system"}).encode() if name == "init.json" else data

    archive = _rewrite(tmp_path / "s.zip", tmp_path / "init.zip", edit)
    return {"default": _outcome(lambda: zipsave.load(archive))}


def _names(tmp_path: Path) -> dict[str, set[str]]:
    archive = _rewrite(_model(tmp_path), tmp_path / "dots.zip", lambda n, b: b, extra=[("../evil", b"x")])
    (tmp_path / "not.zip").write_bytes(b"hello")
    return {
        "default": _outcome(lambda: zipsave.load(archive)),
        "not a zip": _outcome(lambda: zipsave.load(tmp_path / "not.zip")),
    }


def _limits(tmp_path: Path) -> dict[str, set[str]]:
    archive = _model(tmp_path)
    return {"default": _outcome(lambda: zipsave.load(archive, limits=zipsave.Limits(max_member_bytes=100)))}


def _tensor_crc(tmp_path: Path) -> dict[str, set[str]]:
    archive = _model(tmp_path)
    raw = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo("policy.pth")
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    raw[info.header_offset + 30 + name_len + extra_len + info.file_size - 40] ^= 0x01
    archive.write_bytes(raw)
    return {"default": _outcome(lambda: zipsave.load(archive))}


def _edited_data(tmp_path: Path) -> dict[str, set[str]]:
    zipsave.save({"gamma": 0.9}, tmp_path / "g.zip")
    edit = lambda n, b: b.replace(b"0.9", b"0.5") if n == "data" else b  # noqa: E731
    archive = _rewrite(tmp_path / "g.zip", tmp_path / "edited.zip", edit)
    return {
        "default": _outcome(lambda: zipsave.load(archive)),
        "strict": _outcome(lambda: zipsave.load(archive, strict=True)),
    }


def _missing(tmp_path: Path) -> dict[str, set[str]]:
    return {"default": _outcome(lambda: zipsave.load(tmp_path / "nothing-here.zip"))}


def _unsigned(tmp_path: Path) -> dict[str, set[str]]:
    pytest.importorskip("model_signing")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    (tmp_path / "ci.pub").write_bytes(
        key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    archive = _model(tmp_path)
    trust = zipsave.Trust(public_keys=[tmp_path / "ci.pub"])
    return {"default": _outcome(lambda: zipsave.load(archive, trust=trust))}


# (words of the row's first cell, the scenario, what each of its loads gives)
CASES = [
    ("a pickled value whose global", _pickled, {"default": {"SkippedEntryWarning"}, "strict": {"UnsafeGlobalError"}}),
    ("a native reference to such a global", _reference, {"default": {"SkippedEntryWarning", "ZipsaveWarning"}}),
    # (the edited init.json also differs from manifest.json: a ZipsaveWarning beside the error)
    ("an ``init.json`` naming a class", _init_json, {"default": {"UnsafeGlobalError", "ZipsaveWarning"}}),
    ("a member name with ``..``", _names, {"default": {"ArchiveFormatError"}, "not a zip": {"ArchiveFormatError"}}),
    ("a member larger than", _limits, {"default": {"ArchiveLimitError"}}),
    ("a tensor member whose bytes", _tensor_crc, {"default": {"IntegrityError"}}),
    (
        "a ``data`` member edited after saving",
        _edited_data,
        {"default": {"ZipsaveWarning"}, "strict": {"IntegrityError"}},
    ),
    ("nothing: no file at that path", _missing, {"default": {"ArchiveNotFoundError"}}),
    ("with ``trust=``: no signature", _unsigned, {"default": {"SignatureError"}}),
]


def test_every_row_of_the_table_is_run_here():
    assert sorted(row for row, _ in _rows()) == sorted(
        next(row for row, _ in _rows() if row.startswith(words)) for words, _, _ in CASES
    )
    assert len(_rows()) == len(CASES)


@pytest.mark.parametrize("words,scenario,expected", CASES, ids=[c[0][:30] for c in CASES])
def test_a_row_of_the_table_is_what_a_load_does(tmp_path, monkeypatch, words, scenario, expected):
    monkeypatch.chdir(tmp_path)
    assert scenario(tmp_path) == expected
    (answer,) = [said for row, said in _rows() if row.startswith(words)]
    for kind, classes in expected.items():
        # the row names the class of each outcome; the generic ZipsaveWarning that comes beside
        # a more specific outcome (a skipped key, an edited member) is named only when alone
        named = classes - {"ZipsaveWarning"} or classes
        for name in named:
            assert f"zipsave.{name}`" in answer, (kind, name, answer)
        assert ("``strict=True``" in answer) == ("strict" in expected)
