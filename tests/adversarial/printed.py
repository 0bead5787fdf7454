"""The printed-field family of the adversarial suite: every control character in every field
an archive or a checkpoint directory brings to a person's screen.

:data:`CONTROLS` is the characters (C0, DEL, C1, bidi overrides and isolates, zero-width and
separator characters, a lone surrogate) and the escape sequences built from them; each
``FIELDS`` generator writes files whose one field holds every one of them, each in a name of
its own (``f"k{i}{control}"``), and says which command-line runs and API calls show that
field. The test checks every output for raw characters and for the visible form of each.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import zipfile
import zlib
from collections.abc import Callable
from typing import Any

#: Single characters a terminal acts on or hides.
CHARACTERS: tuple[str, ...] = (
    tuple(chr(c) for c in range(0x00, 0x20))
    + ("\x7f",)
    + tuple(chr(c) for c in range(0x80, 0xA0))
    + tuple(chr(c) for c in range(0x202A, 0x202F))  # LRE RLE PDF LRO RLO
    + tuple(chr(c) for c in range(0x2066, 0x206A))  # LRI RLI FSI PDI
    + ("\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u2028", "\u2029", "\ufeff", "\u061c", "\u00ad")
)
#: Sequences that do something: clear the screen, write the clipboard (OSC 52), move the
#: cursor, set the title, the 8-bit CSI.
SEQUENCES: tuple[str, ...] = (
    "\x1b[2J\x1b[H",
    "\x1b]52;c;cHduZWQ=\x07",
    "\x1b[1A\x1b[2K",
    "\x1b]0;title\x1b\\",
    "\x9b31m",
    "\r\x1b[K",
)
CONTROLS: tuple[str, ...] = CHARACTERS + SEQUENCES
#: The controls that end a line for ``str.splitlines``: a field read line by line
#: (``system_info.txt``, ``_zipsave_version``) cannot hold them.
LINE_BREAKS: tuple[str, ...] = tuple(c for c in CONTROLS if len(f"a{c}b".splitlines()) > 1)
#: Where a lone surrogate can be written (JSON escapes; not zip names, which are UTF-8).
SURROGATE = "\udcff"


def names(prefix: str = "k", *, surrogate: bool = False) -> list[str]:
    """One name per control: ``k0<control>``, ``k1<control>``... (unique, never empty)."""
    controls = CONTROLS + ((SURROGATE,) if surrogate else ())
    return [f"{prefix}{i}{control}z" for i, control in enumerate(controls)]


def raw_controls(text: str, *, allow: str = "\n") -> set[str]:
    """The characters of ``text`` that are neither printable nor in ``allow``."""
    if text.isprintable():
        return set()
    return {ch for ch in text if not ch.isprintable() and ch not in allow}


# -- writing archives ------------------------------------------------------------------------
def write_zip(path: str, members: dict[str, bytes], *, manifest: bool = True) -> str:
    """A zip of ``members`` as Python's zipfile writes it (UTF-8 names flagged), with
    zipsave's ``manifest.json`` over them unless ``manifest=False``."""
    entries = {
        name: {"size": len(raw), "crc32": f"{zlib.crc32(raw):08x}", "sha256": hashlib.sha256(raw).hexdigest()}
        for name, raw in members.items()
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)
        if manifest:
            body = {"format": "zipsave", "format_version": 1, "members": entries}
            zf.writestr("manifest.json", json.dumps(body, indent=2))
    return path


def _pth(state: dict) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def base_members() -> dict[str, bytes]:
    """A small app-state archive's members: ``data`` with one key, and one ``net.pth``."""
    import torch

    return {
        "data": json.dumps({"lr": 0.5}).encode(),
        "net.pth": _pth({"weight": torch.zeros(2, 2)}),
        "_zipsave_version": b"zipsave 0.2.0\nformat 1\n",
        "system_info.txt": b"- OS: Linux\n- Python: 3.11.7\n",
    }


def _pickle_of_global(module: str, name: str) -> bytes:
    """A pickle that would import ``module.name`` (protocol 4 STACK_GLOBAL of two UTF-8
    strings, so any character can be in the names)."""

    def text(s: str) -> bytes:
        raw = s.encode("utf-8")
        return b"\x8c" + bytes([len(raw)]) + raw

    return b"\x80\x04" + text(module) + text(name) + b"\x93."


# -- the fields ------------------------------------------------------------------------------
@dataclasses.dataclass
class Field:
    """One printed field with its hostile files: ``make(folder)`` writes them and returns
    ``{"archive": path, ...}``; ``cli`` lists the command lines to run (``{archive}``,
    ``{base}``, ``{folder}``, ``{directory}`` filled in); ``api`` whether to run the API calls
    (inspect, its HTML, load with warnings) on ``archive``; ``every`` whether each control's
    visible form must show (``False`` where a refusal stops at the first name)."""

    name: str
    make: Callable[[str], dict[str, str]]
    cli: tuple[tuple[str, ...], ...] = (("inspect", "{archive}"), ("inspect", "--json", "{archive}"))
    api: bool = True
    every: bool = True
    #: Controls the field cannot hold (a zip name ends at NUL in Python's zipfile).
    cannot_hold: tuple[str, ...] = ()


def _data_keys(folder: str) -> dict[str, str]:
    data = {name: 1 for name in names(surrogate=True)}
    members = {**base_members(), "data": json.dumps(data).encode()}
    return {"archive": write_zip(os.path.join(folder, "a.zip"), members)}


def _type_texts(folder: str) -> dict[str, str]:
    # Each key: a `:type:` text with a control, over a pickle of a global nothing trusts, so a
    # load skips it with a warning that quotes the type.
    payload = base64.b64encode(_pickle_of_global("nowhere_module", "Thing")).decode()
    data = {f"k{i}": {":type:": f"<class '{name}'>", ":serialized:": payload} for i, name in enumerate(names())}
    members = {**base_members(), "data": json.dumps(data).encode()}
    return {"archive": write_zip(os.path.join(folder, "a.zip"), members)}


def _pickle_globals(folder: str) -> dict[str, str]:
    data = {
        f"k{i}": {
            ":type:": "<class 'object'>",
            ":serialized:": base64.b64encode(_pickle_of_global("m" + name, "N")).decode(),
        }
        for i, name in enumerate(names())
    }
    members = {**base_members(), "data": json.dumps(data).encode()}
    return {"archive": write_zip(os.path.join(folder, "a.zip"), members)}


def _member_names(folder: str) -> dict[str, str]:
    members = {**base_members(), **{f"extra/{name}": b"x" for name in names() if "\x00" not in name}}
    return {"archive": write_zip(os.path.join(folder, "a.zip"), members)}


def _tensor_names(folder: str) -> dict[str, str]:
    import torch

    members = {**base_members(), "net.pth": _pth({name: torch.zeros(1) for name in names()})}
    return {"archive": write_zip(os.path.join(folder, "a.zip"), members)}


def _system_info(folder: str) -> dict[str, str]:
    text = "".join(f"- {name}: {name}\n" for name in names())
    members = {**base_members(), "system_info.txt": text.encode()}
    return {"archive": write_zip(os.path.join(folder, "a.zip"), members)}


def _versions(folder: str) -> dict[str, str]:
    text = "zipsave " + "".join(n for n, c in zip(names(), CONTROLS) if c not in LINE_BREAKS) + "\nformat 1\n"
    members = {**base_members(), "_zipsave_version": text.encode()}
    return {"archive": write_zip(os.path.join(folder, "a.zip"), members)}


def _init_class(folder: str) -> dict[str, str]:
    members = {**base_members(), "init.json": json.dumps({"class": "".join(names()) + ":X", "args": {}}).encode()}
    return {"archive": write_zip(os.path.join(folder, "a.zip"), members)}


def _components(folder: str) -> dict[str, str]:
    members = dict(base_members())
    for name in names():
        if "\x00" not in name:
            members[f"{name}/data"] = b"{}"
    return {"archive": write_zip(os.path.join(folder, "a.zip"), members)}


def _unsafe_member(folder: str) -> dict[str, str]:
    # A refusal: the first traversing name stops the read, so one archive per control would be
    # needed to see each; the message must carry it escaped all the same.
    members = {**base_members(), **{f"../{name}": b"x" for name in names() if "\x00" not in name}}
    return {"archive": write_zip(os.path.join(folder, "a.zip"), members)}


def _diff_values(folder: str) -> dict[str, str]:
    base = base_members()
    old = {**base, "data": json.dumps({name: "old" for name in names()}).encode()}
    new = {**base, "data": json.dumps({name: name for name in names()}).encode()}
    return {
        "base": write_zip(os.path.join(folder, "old.zip"), old),
        "archive": write_zip(os.path.join(folder, "a.zip"), new),
    }


def _index(folder: str, metrics: dict[str, Any]) -> dict[str, str]:
    directory = os.path.join(folder, "ckpt")
    os.makedirs(directory)
    members = base_members()
    write_zip(os.path.join(directory, "step-0000000001.zip"), members)
    size = os.path.getsize(os.path.join(directory, "step-0000000001.zip"))
    entry = {"step": 1, "file": "step-0000000001.zip", "time": 1.7e9, "size": size, "metrics": metrics}
    index = {"format": "zipsave-checkpoints", "version": 1, "checkpoints": [entry]}
    with open(os.path.join(directory, "zipsave-checkpoints.json"), "w") as fp:
        json.dump(index, fp)
    return {"directory": directory, "archive": os.path.join(directory, "step-0000000001.zip")}


FIELDS: tuple[Field, ...] = (
    Field(
        "data_key",
        _data_keys,
        cli=(("inspect", "{archive}"), ("inspect", "--json", "{archive}"), ("diff", "{archive}", "{archive}")),
    ),
    Field("type_text", _type_texts),
    Field("pickle_global", _pickle_globals),
    Field(
        "member_name",
        _member_names,
        cli=(
            ("inspect", "{archive}"),
            ("inspect", "--json", "{archive}"),
            ("verify", "{archive}"),
            ("extract", "{archive}", "{folder}/out"),
        ),
        cannot_hold=("\x00",),
    ),
    Field("tensor_name", _tensor_names, cli=(("inspect", "{archive}"), ("diff", "{archive}", "{archive}"))),
    Field("system_info", _system_info, cannot_hold=LINE_BREAKS),
    Field("version_text", _versions, cannot_hold=LINE_BREAKS),
    Field("init_class", _init_class),
    Field("component", _components, cannot_hold=("\x00",)),
    Field(
        "unsafe_member",
        _unsafe_member,
        cli=(("inspect", "{archive}"), ("verify", "{archive}"), ("extract", "{archive}", "{folder}/out")),
        every=False,
    ),
    Field("diff_value", _diff_values, cli=(("diff", "{base}", "{archive}"), ("diff", "--json", "{base}", "{archive}"))),
    Field(
        "metric_name",
        lambda folder: _index(folder, {name: 1.0 for name in names()}),
        cli=(("list", "{directory}"), ("list", "--json", "{directory}")),
        api=False,
    ),
    Field(
        "metric_value",
        lambda folder: _index(folder, {f"m{i}": name for i, name in enumerate(names())}),
        cli=(("list", "{directory}"), ("list", "--json", "{directory}")),
        api=False,
    ),
)
