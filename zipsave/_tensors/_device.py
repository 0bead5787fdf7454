"""What a load builds its tensors with: the ``device=`` argument of every loading verb, resolved
and checked before a byte is read, and torch's own dtypes (layouts, quantization schemes) for the
stand-ins of the ``.pth`` metadata reader (:mod:`._pth_dtypes`), one dict lookup per tensor."""

from __future__ import annotations

import collections
from typing import Any

import torch

from ..exceptions import DeviceError
from ._pth_dtypes import DTYPES, LAYOUTS, QSCHEMES, STAND_INS, DType, TorchName

__all__ = ["TORCH_OBJECTS", "as_torch", "as_torch_tree", "get_device", "torch_dtype"]


def get_device(device: Any = "auto", *, mmap: bool = False) -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU (SB3's rule); anything else via ``torch.device``.

    With ``mmap``, ``"auto"`` is the CPU: a mapping lives in host memory, and a caller who asks
    for one wants file-backed tensors (``torch.load(mmap=True)`` keeps them there too); naming a
    device still moves them.

    CUDA asked for where there is none falls back to the CPU, as in SB3. Any other device this
    machine cannot use (``"mps"`` without Metal, ``"cuda:3"`` on a one-GPU machine) is a
    :class:`~zipsave.DeviceError` here (a ``ValueError`` and, as torch raises through SB3's
    ``load``, a ``RuntimeError``), before a byte is read, not a corrupt-looking member later.
    """
    if device is None or (isinstance(device, str) and device == "auto"):
        device = "cuda" if torch.cuda.is_available() and not mmap else "cpu"
    try:
        dev = device if isinstance(device, torch.device) else torch.device(device)
    except (RuntimeError, TypeError, ValueError) as err:
        raise DeviceError(
            f"device={device!r} is not a torch device ({err}).",
            hint="Pass 'auto', 'cpu', 'cuda', 'cuda:1' or a torch.device.",
        ) from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu")
    if dev.type not in ("cpu", "meta"):
        try:
            torch.empty(0, device=dev)
        except (RuntimeError, AssertionError) as err:
            raise DeviceError(
                f"device={device!r} is not available on this machine ({str(err).splitlines()[0]}).",
                hint="Pass device='auto' or 'cpu'.",
            ) from err
    return dev


# -- torch's objects for the metadata reader's stand-ins ---------------------------------------
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
