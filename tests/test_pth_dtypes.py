"""The ``.pth`` metadata reader's fixed tables of torch's names (``zipsave._tensors._pth_dtypes``)
against the installed torch: every dtype torch names (aliases included) with its size and kind,
the legacy storage and tensor class names, the layouts and quantization schemes. A torch that
adds a dtype fails here, before a user's archive holding one is refused as an unknown global."""

from __future__ import annotations

import pytest
import torch

from zipsave._tensors import as_torch, torch_dtype
from zipsave._tensors._pth_dtypes import (
    DTYPES,
    LAYOUTS,
    QSCHEMES,
    SPARSE_LAYOUTS,
    STORAGE_DTYPES,
    TENSOR_CLASSES,
)

_QUANTIZED = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}


def _torch_names(kind: type) -> dict[str, object]:
    return {name: getattr(torch, name) for name in dir(torch) if isinstance(getattr(torch, name, None), kind)}


def test_every_dtype_name_of_torch_is_in_the_table_and_no_other():
    assert sorted(DTYPES) == sorted(_torch_names(torch.dtype))


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_each_dtype_is_torchs_in_size_kind_and_print(name):
    ours, theirs = DTYPES[name], getattr(torch, name)
    assert torch_dtype(ours) is theirs and as_torch(ours) is theirs
    assert (repr(ours), str(ours)) == (repr(theirs), str(theirs))  # "torch.float32", aliases too
    assert ours.itemsize == theirs.itemsize
    assert ours.is_floating_point == theirs.is_floating_point
    assert ours.is_complex == theirs.is_complex
    assert ours.quantized == (theirs in _QUANTIZED)
    assert (ours.kind == "b") == (theirs is torch.bool)
    if ours.kind in "iu":
        assert theirs.is_signed == (ours.kind == "i")
    if ours.kind == "x":  # raw bits: torch gives them no sign
        with pytest.raises(RuntimeError):
            _ = theirs.is_signed


def test_aliases_are_one_stand_in_as_torch_has_one_dtype():
    assert (
        DTYPES["float"] is DTYPES["float32"] and DTYPES["long"] is DTYPES["int64"] and DTYPES["bit"] is DTYPES["uint1"]
    )


def test_legacy_storage_names_hold_torchs_dtypes():
    table = torch.storage._dtype_to_storage_type_map()
    assert {name: torch_dtype(dtype) for name, dtype in STORAGE_DTYPES.items()} == {n: d for d, n in table.items()}


def test_tensor_class_names_are_torchs():
    assert TENSOR_CLASSES == {f"{c.__module__}.{c.__name__}" for c in torch._tensor_classes} | {"torch.Tensor"}


def test_layouts_and_quantization_schemes_are_torchs():
    for text, ours in LAYOUTS.items():
        assert repr(ours) == text == repr(as_torch(ours)) and isinstance(as_torch(ours), torch.layout)
    # torch's other layouts are refused by name ("layout 'torch.jagged'"): a new one is noticed here
    assert sorted(set(_torch_names(torch.layout)) - {o.name for o in LAYOUTS.values()}) == ["_mkldnn", "jagged"]
    assert {as_torch(layout) for layout in SPARSE_LAYOUTS} == {
        torch.sparse_coo,
        torch.sparse_csr,
        torch.sparse_csc,
        torch.sparse_bsr,
        torch.sparse_bsc,
    }
    assert sorted(QSCHEMES) == sorted(_torch_names(torch.qscheme))
    assert all(repr(as_torch(q)) == repr(q) for q in QSCHEMES.values())


@pytest.mark.parametrize(
    "misuse",
    [lambda x: x(1), lambda x: x.append(1), lambda x: setattr(x, "itemsize", 1), lambda x: setattr(x, "kind", 1)],
    ids=["call", "append", "set itemsize", "set other"],
)
def test_a_pickle_misusing_a_stand_in_is_told_what_torchs_would_say(misuse):
    """Stand-ins are shared by every read, so none may change; and a pickle that calls or
    changes one gets Python's words about ``torch.dtype``, as before."""
    errors = []
    for value in (DTYPES["float32"], torch.float32, LAYOUTS["torch.strided"], torch.strided):
        with pytest.raises((TypeError, AttributeError)) as caught:
            misuse(value)
        errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1] and errors[2] == errors[3]
    assert DTYPES["float32"].itemsize == 4
