"""torch's own objects for the stand-ins of the ``.pth`` metadata reader (:mod:`._pth_dtypes`):
one dict lookup per tensor where tensors are built, and the values of a loaded tree that name
a dtype, layout or quantization scheme turned into torch's."""

from __future__ import annotations

import collections
from typing import Any

import torch

from ._pth_dtypes import DTYPES, LAYOUTS, QSCHEMES, STAND_INS, DType, TorchName

__all__ = ["TORCH_OBJECTS", "as_torch", "as_torch_tree", "torch_dtype"]


def _objects() -> dict[TorchName, Any]:
    # A name the installed torch lacks has no entry: a tensor of that dtype fails to build
    # (tests/test_pth_dtypes.py says which names differ).
    table: dict[TorchName, Any] = {}
    for stand_in in (*DTYPES.values(), *LAYOUTS.values(), *QSCHEMES.values()):
        found = getattr(torch, stand_in.name, None)
        if found is not None:
            table[stand_in] = found
    return table


#: Each stand-in's torch object (``DTYPES["float32"]`` -> ``torch.float32``).
TORCH_OBJECTS = _objects()


def torch_dtype(dtype: DType) -> torch.dtype:
    """The torch dtype of a tensor reference's :class:`~._pth_dtypes.DType`."""
    return TORCH_OBJECTS[dtype]


def as_torch(value: Any) -> Any:
    """``value`` as torch's own object where it is a stand-in, else as it is (a ``torch.dtype``
    stays one)."""
    return TORCH_OBJECTS[value] if type(value) in STAND_INS else value


_BUILT = (dict, collections.OrderedDict, collections.Counter)


def as_torch_tree(tree: Any) -> Any:
    """``tree`` with every stand-in turned into torch's object: in values, dict keys, sets and
    tuples (a dict's ``_metadata`` included), as the pickle held torch's. Containers holding
    none are kept as they are; only the metadata reader's containers are walked (its depth is
    bounded by :func:`~zipsave._invariants.check_structure`)."""
    kind = type(tree)
    if kind in STAND_INS:
        return TORCH_OBJECTS[tree]
    if kind in _BUILT:
        items = [(as_torch_tree(k), as_torch_tree(v)) for k, v in tree.items()]
        metadata = getattr(tree, "_metadata", None)
        changed = metadata is not None or any(
            k is not k0 or v is not v0 for (k, v), (k0, v0) in zip(items, tree.items())
        )
        if not changed:
            return tree
        out: Any = kind()
        for k, v in items:
            out[k] = v
        if metadata is not None:
            out._metadata = as_torch_tree(metadata)
        return out
    if kind in (list, tuple, set, frozenset):
        items = [as_torch_tree(v) for v in tree]
        if all(a is b for a, b in zip(items, tree)):
            return tree
        return kind(items)
    return tree
