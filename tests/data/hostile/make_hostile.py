"""Write the hand-made hostile archives of this folder (``python make_hostile.py``).

Each archive is built byte by byte with the small zip writer below, not with zipsave, so the
corpus does not change when zipsave's writer does, and so each can lie in exactly one way
(a declared size, a CRC, a name, an offset). Apart from its one lie, every archive is a
consistent zipsave app-state archive: a ``data`` member, optionally a tiny ``policy.pth`` and
an ``arrays/0.npy``, and a ``manifest.json`` that matches. ``tests/test_hostile.py`` says what
each must do when loaded; ``CASES`` at the bottom lists them.

A payload that would have a side effect writes a file named ``ZIPSAVE_PWNED_<case>`` into the
current directory; the tests load from inside an empty temporary folder and check that no
such file appears.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import pickle
import struct
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

# -- a zip writer that can lie ---------------------------------------------------------------


@dataclass
class Member:
    name: str
    data: bytes
    deflate: bool = False
    # Lies, each None for "tell the truth".
    declared_size: int | None = None
    crc: int | None = None
    flags: int = 0
    method: int | None = None
    offset_of: str | None = None  # central entry points at another member's local header
    in_manifest: bool = True
    manifest_data: bytes | None = None  # what the manifest was computed from
    extra: dict = field(default_factory=dict)


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def build_zip(members: list[Member], *, manifest: bool = True) -> bytes:
    """Local headers, data, central directory, end record; zip64 extras where sizes need them."""
    if manifest:
        entries = {}
        for m in members:
            if not m.in_manifest:
                continue
            raw = m.manifest_data if m.manifest_data is not None else m.data
            entries[m.name] = {
                "size": len(raw),
                "crc32": f"{zlib.crc32(raw):08x}",
                "sha256": hashlib.sha256(raw).hexdigest(),
            }
        body = {"format": "zipsave", "format_version": 1, "members": entries}
        import json

        members = members + [Member("manifest.json", json.dumps(body, indent=2).encode())]
    out = io.BytesIO()
    central = []
    offsets: dict[str, int] = {}
    for m in members:
        payload = _deflate(m.data) if m.deflate else m.data
        method = m.method if m.method is not None else (8 if m.deflate else 0)
        crc = m.crc if m.crc is not None else zlib.crc32(m.data)
        size = m.declared_size if m.declared_size is not None else len(m.data)
        name = m.name.encode("utf-8")
        zip64 = size >= 0xFFFFFFFF
        extra = struct.pack("<HHQQ", 1, 16, size, len(payload)) if zip64 else b""
        small_size = 0xFFFFFFFF if zip64 else size
        small_csize = 0xFFFFFFFF if zip64 else len(payload)
        offsets.setdefault(m.name, out.tell())
        offset = out.tell()
        out.write(
            struct.pack(
                "<IHHHHHIIIHH",
                0x04034B50,
                45,
                m.flags,
                method,
                0,
                33,
                crc,
                small_csize,
                small_size,
                len(name),
                len(extra),
            )
        )
        out.write(name + extra + payload)
        central.append((m, name, method, crc, small_size, small_csize, extra, offset))
    cd_start = out.tell()
    for m, name, method, crc, small_size, small_csize, extra, offset in central:
        if m.offset_of is not None:
            offset = offsets[m.offset_of]
        out.write(
            struct.pack(
                "<IHHHHHHIIIHHHHHII",
                0x02014B50,
                45,
                45,
                m.flags,
                method,
                0,
                33,
                crc,
                small_csize,
                small_size,
                len(name),
                len(extra),
                0,
                0,
                0,
                0,
                offset,
            )
        )
        out.write(name + extra)
    cd_size = out.tell() - cd_start
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central), cd_size, cd_start, 0))
    return out.getvalue()


# -- ingredients -----------------------------------------------------------------------------
def data_json(entries: dict) -> bytes:
    import json

    return (json.dumps(entries, indent=2) + "\n").encode()


def serialized(payload: bytes) -> dict:
    return {":type:": "<class 'object'>", ":serialized:": base64.b64encode(payload).decode()}


class _Reduce:
    """Pickles as ``func(*args)``: what a hostile pickle does."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args

    def __call__(self, *args):  # pickle insists that a REDUCE target looks callable
        raise AssertionError("never called while building the corpus")


def marker(case: str) -> str:
    return f"ZIPSAVE_PWNED_{case}"


def tiny_pth() -> bytes:
    import torch

    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.save(torch.nn.Linear(2, 2).state_dict(), buf)
    return buf.getvalue()


def tiny_npy(header_shape: tuple | None = None) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.arange(6, dtype=np.float32), allow_pickle=False)
    raw = buf.getvalue()
    if header_shape is None:
        return raw
    # Same bytes, header rewritten to declare another shape (padded to the same length).
    header_len = struct.unpack("<H", raw[8:10])[0]
    header = repr({"descr": "<f4", "fortran_order": False, "shape": header_shape}).encode()
    header = header.ljust(header_len - 1) + b"\n"
    return raw[:10] + header + raw[10 + header_len :]


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def plain(extra: dict | None = None) -> bytes:
    return data_json({"learning_rate": 0.001, "n_steps": 16, **(extra or {})})


# -- the cases -------------------------------------------------------------------------------
def cases() -> dict[str, bytes]:
    out: dict[str, bytes] = {}

    def add(name: str, members: list[Member], **kw) -> None:
        out[name] = build_zip(members, **kw)

    # a consistent archive, the base of the corruption cases
    valid = [
        Member(
            "data",
            plain(
                {
                    "arr": {
                        ":type:": "<class 'numpy.ndarray'>",
                        ":zipsave:": {"kind": "ndarray", "dtype": "<f4", "shape": [6], "member": "arrays/0.npy"},
                    }
                }
            ),
        ),
        Member("policy.pth", tiny_pth()),
        Member("arrays/0.npy", tiny_npy()),
    ]
    add("valid.zip", valid)

    # pickled payloads: each names a global outside the allowlist
    payloads = {
        "os_system": _Reduce(os.system, f"echo pwned > {marker('os_system')}"),
        "file_write": _Reduce(open, marker("file_write"), "w"),
        # getattr(__import__("os"), "system")("echo ...")
        "getattr": _Reduce(_Reduce(getattr, _Reduce(__import__, "os"), "system"), f"echo pwned > {marker('getattr')}"),
        "subprocess": _Reduce(__import__("subprocess").Popen, ["touch", marker("subprocess")]),
        "eval": _Reduce(eval, f"open({marker('eval')!r}, 'w')"),
    }
    for case, obj in payloads.items():
        # `open` is `io.open` up to CPython 3.11 and `_io.open` from 3.12 on (its __module__):
        # one spelling, so the corpus is the same bytes on every Python
        payload = pickle.dumps(obj, protocol=2).replace(b"c_io\nopen\n", b"cio\nopen\n")
        add(f"pickle_{case}.zip", [Member("data", plain({"evil": serialized(payload)}))])

    # init.json naming something that is not a zipsave.Saveable
    add(
        "init_os_system.zip",
        [
            Member("data", plain()),
            Member(
                "init.json",
                data_json({"class": "os:system", "args": {"command": f"echo pwned > {marker('init_os_system')}"}}),
            ),
        ],
    )
    add(
        "init_popen.zip",
        [
            Member("data", plain()),
            Member(
                "init.json", data_json({"class": "subprocess:Popen", "args": {"args": ["touch", marker("init_popen")]}})
            ),
        ],
    )

    # native references that would hand out, or call, a dangerous global
    def native(body: dict) -> dict:
        return {":type:": "<class 'object'>", ":zipsave:": body}

    add("ref_os_system.zip", [Member("data", plain({"evil": native({"kind": "ref", "path": "os:system"})}))])
    add("ref_eval.zip", [Member("data", plain({"evil": native({"kind": "ref", "path": "builtins:eval"})}))])
    add(
        "namedtuple_os_system.zip",
        [
            Member(
                "data",
                plain(
                    {
                        "evil": native(
                            {
                                "kind": "namedtuple",
                                "class": "os:system",
                                "items": [f"echo pwned > {marker('namedtuple')}"],
                            }
                        )
                    }
                ),
            )
        ],
    )
    add(
        "enum_os_system.zip",
        [
            Member(
                "data",
                plain(
                    {
                        "evil": native(
                            {
                                "kind": "enum",
                                "class": "os:system",
                                "name": "x",
                                "value": f"echo pwned > {marker('enum')}",
                            }
                        )
                    }
                ),
            )
        ],
    )
    add(
        "defaultdict_eval.zip",
        [Member("data", plain({"evil": native({"kind": "defaultdict", "factory": "builtins:eval", "items": []})}))],
    )

    # zip bombs and lying sizes
    spaces = b"{" + b" " * (20 << 20) + b"}"  # 20 MiB that deflates to ~20 KiB
    add("bomb_ratio.zip", [Member("data", spaces, deflate=True)])
    add("bomb_declared_huge.zip", [Member("data", plain(), deflate=True, declared_size=1 << 41)], manifest=False)
    add("data_1gb.zip", [Member("data", plain(), deflate=True, declared_size=1 << 30)], manifest=False)
    add(
        "declared_too_small.zip",
        [Member("data", plain({"pad": "x" * 1000}), deflate=True, declared_size=10)],
        manifest=False,
    )
    add("stored_size_lie.zip", [Member("data", plain(), declared_size=10)], manifest=False)
    add("overlap.zip", [Member("data", plain()), Member("data2", plain(), offset_of="data")], manifest=False)
    add(
        "npy_huge_shape.zip",
        [
            Member(
                "data",
                plain(
                    {"arr": native({"kind": "ndarray", "dtype": "<f4", "shape": [10**12], "member": "arrays/0.npy"})}
                ),
            ),
            Member("arrays/0.npy", tiny_npy(header_shape=(10**12,))),
        ],
    )

    # names
    add("dotdot.zip", [Member("data", plain()), Member("../evil.txt", b"x")], manifest=False)
    add("absolute.zip", [Member("data", plain()), Member("/tmp/evil.txt", b"x")], manifest=False)
    add("drive.zip", [Member("data", plain()), Member("C:/evil.txt", b"x")], manifest=False)
    add("backslash.zip", [Member("data", plain()), Member("..\\evil.txt", b"x")], manifest=False)
    add("duplicate.zip", [Member("data", plain()), Member("data", plain({"n_steps": 99}))], manifest=False)

    # structure
    add("encrypted.zip", [Member("data", plain(), flags=0x1)], manifest=False)
    add("bzip2.zip", [Member("data", plain(), method=12)], manifest=False)
    add("deep_json.zip", [Member("data", b"[" * 100_000 + b"]" * 100_000, deflate=True)])
    add("deep_json_object.zip", [Member("data", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, deflate=True)])
    add("data_not_object.zip", [Member("data", b"[1, 2, 3]\n")])
    add("not_json.zip", [Member("data", b"\xff\xfe not json")])
    out["truncated.zip"] = out["valid.zip"][: len(out["valid.zip"]) // 2]
    out["not_a_zip.zip"] = b"this is not a zip archive\n" * 4
    out["empty.zip"] = b""

    # integrity: one member differs from the manifest, the zip's own CRC made consistent
    pth = tiny_pth()
    bad_pth = flip(pth, len(pth) // 2)
    npy = tiny_npy()
    bad_npy = flip(npy, len(npy) - 3)
    base_data = valid[0].data
    edited = base_data.replace(b'"n_steps": 16', b'"n_steps": 32')
    add(
        "mismatch_pth.zip",
        [Member("data", base_data), Member("policy.pth", bad_pth, manifest_data=pth), Member("arrays/0.npy", npy)],
    )
    add(
        "mismatch_npy.zip",
        [Member("data", base_data), Member("policy.pth", pth), Member("arrays/0.npy", bad_npy, manifest_data=npy)],
    )
    add(
        "edited_data.zip",
        [Member("data", edited, manifest_data=base_data), Member("policy.pth", pth), Member("arrays/0.npy", npy)],
    )
    add("unlisted_member.zip", [Member("data", plain()), Member("extra.pth", pth, in_manifest=False)])
    # the zip's CRC is the lie here (bytes flipped after the CRC was taken)
    add("crc_mismatch_pth.zip", [Member("data", plain()), Member("policy.pth", bad_pth, crc=zlib.crc32(pth))])
    return out


def main(folder: Path = HERE) -> None:
    for name, raw in sorted(cases().items()):
        (folder / name).write_bytes(raw)
        print(f"{name:28s} {len(raw):8d} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
