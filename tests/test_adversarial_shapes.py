"""Zero-size arrays and tensors whose other dimensions are huge: ``(2**62, 0)`` holds no byte,
so no size check saw it, yet ``tolist()`` makes a list for each of its 2**62 rows
(``MemoryError``) and iterating over it never ends; ``(8, 0, 2**59)`` stands for 2**62 too. A value stands for the rows such a walk
visits (each zero dimension counted as 1), bounded like the bytes it may allocate; real
zero-size values (an empty batch, ``(0, 5)``, ``(1000, 0)``) load as saved."""

from __future__ import annotations

import base64
import io
import json
import pathlib
import pickle
import re
import sys

import numpy as np
import pytest
import torch

import zipsave

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from adversarial.printed import base_members, write_zip  # noqa: E402

_HUGE = (8, 0, 2**59)  # 2**62 rows of rows: a zero before the huge dimension hid it from a running product


def _npy(shape: tuple) -> bytes:
    header = repr({"descr": "|u1", "fortran_order": False, "shape": shape}).encode()
    header += b" " * (117 - len(header)) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header


def _pth(t: torch.Tensor) -> bytes:
    buf = io.BytesIO()
    torch.save({"weight": t}, buf)
    return buf.getvalue()


def _forms() -> dict[str, tuple[dict[str, bytes], dict | None]]:
    array = {"kind": "ndarray", "dtype": "|u1", "shape": list(_HUGE)}
    typ = "<class 'numpy.ndarray'>"
    tensor = {
        "kind": "tensor",
        "dtype": "uint8",
        "shape": list(_HUGE),
        "data": {"kind": "ndarray", "dtype": "|u1", "shape": [0], "b64": ""},
    }
    return {
        "native_b64": ({}, {":type:": typ, ":zipsave:": {**array, "b64": ""}}),
        "native_values": ({}, {":type:": typ, ":zipsave:": {**array, "values": []}}),
        "npy": ({"arrays/0.npy": _npy(_HUGE)}, {":type:": typ, ":zipsave:": {**array, "member": "arrays/0.npy"}}),
        "pickle": ({}, {":type:": typ, ":serialized:": base64.b64encode(pickle.dumps(np.zeros(_HUGE, "u1"))).decode()}),
        "native_tensor": ({}, {":type:": "<class 'torch.Tensor'>", ":zipsave:": tensor}),
        "pth": ({"net.pth": _pth(torch.empty(_HUGE, dtype=torch.uint8))}, None),
    }


FORMS = _forms()


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_zero_size_value_of_huge_rows_is_refused(form, tmp_path):
    members, entry = FORMS[form]
    files = {**base_members(), **members}
    if entry is not None:
        files["data"] = json.dumps({"lr": 0.5, "evil": entry}).encode()
    path = write_zip(str(tmp_path / "shape.zip"), files)
    key = "evil" if entry is not None else "net/weight"
    with pytest.raises(zipsave.ZipsaveError, match=re.escape(str(2**62))) as caught:
        zipsave.load(path, strict=True)
    assert path in str(caught.value)
    with pytest.raises(zipsave.ZipsaveError, match=re.escape(str(2**62))):
        zipsave.read(path, key)


@pytest.mark.parametrize(
    "value",
    [np.zeros((0, 5)), np.zeros((1000, 0), "u1"), np.zeros((3, 0, 4)), torch.empty(0, 3), torch.empty(500, 0)],
    ids=["array_0x5", "array_1000x0", "array_3x0x4", "tensor_0x3", "tensor_500x0"],
)
def test_real_zero_size_values_load(value, tmp_path):
    zipsave.save({"v": value, "net": torch.nn.Linear(2, 2)}, tmp_path / "ok.zip")
    got = zipsave.load(tmp_path / "ok.zip", strict=True)["v"]
    assert type(got) is type(value) and tuple(got.shape) == tuple(value.shape)
