"""What torch's loader would allocate for the calls in a pickle, checked by the pre-scan before
torch reads it: a tensor laid over a storage (``set_()`` grows the storage to whatever offset,
size and stride the pickle names), and storages, tensors or bytearrays built from a size."""

from __future__ import annotations

import sys
from typing import Any

from .._bounds import AllocBudget
from .._invariants import tensor_span
from ..exceptions import ArchiveLimitError

__all__ = ["LEGACY_ITEMSIZE", "StorageRecord", "check_torch_call", "storage_reference"]

#: Bytes per element of torch's legacy storage classes (``torch.FloatStorage``...).
LEGACY_ITEMSIZE = {
    "Double": 8,
    "Float": 4,
    "Half": 2,
    "BFloat16": 2,
    "Long": 8,
    "Int": 4,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
}

#: torch's rebuild functions that lay a tensor over a storage with ``set_()``:
#: ``(storage, offset, size, stride, ...)``.
_OVER_STORAGE = frozenset(
    {
        "torch._utils._rebuild_tensor",
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_tensor_v3",
        "torch._utils._rebuild_qtensor",
    }
)


class StorageRecord:
    """A storage reference in a pre-scan: the bytes torch will give it (its record's size, or
    what the reference claims when the records are not known) and its element size."""

    def __init__(self, key: Any, nbytes: int, itemsize: int) -> None:
        self.key, self.nbytes, self.itemsize = key, nbytes, itemsize


def _name(obj: Any) -> str:
    name = getattr(obj, "name", "")
    return name if isinstance(name, str) else ""


def storage_reference(pid: Any, records: dict[str, int] | None, **where: Any) -> StorageRecord | None:
    """The storage a ``torch.save`` persistent id ``("storage", type, key, location, numel)``
    stands for, or None for another id. With ``records`` (storage key -> the bytes of its
    record), a reference claiming more than its record holds is refused."""
    if not (type(pid) is tuple and len(pid) in (5, 6) and pid[0] == "storage" and type(pid[4]) is int):
        return None
    kind = _name(pid[1])
    itemsize = (
        1
        if kind.endswith("UntypedStorage")
        else LEGACY_ITEMSIZE.get(kind.rpartition(".")[2].removesuffix("Storage"), 1)
    )
    claimed = pid[4] * itemsize
    if records is not None:
        held = records.get(str(pid[2]))
        if held is None or claimed > held:
            raise ArchiveLimitError(
                f"a storage reference `{pid[2]}` claims {claimed} bytes; its record holds "
                f"{'none' if held is None else held}.",
                **where,
            )
        claimed = held
    return StorageRecord(pid[2], claimed, itemsize)


def _itemsize(dtype: Any) -> int | None:
    """Bytes per element of a pickled ``torch.<dtype>`` name, where torch is already imported."""
    torch = sys.modules.get("torch")
    found = getattr(torch, _name(dtype).partition(".")[2], None) if torch is not None and _name(dtype) else None
    return found.itemsize if found is not None and type(found).__name__ == "dtype" else None


def check_torch_call(func: Any, args: Any, budget: AllocBudget, **where: Any) -> None:
    """Refuse a call torch's loader would make (``func`` a global the pre-scan named) that
    allocates past the file's own bytes: a tensor reaching past its storage, or a storage,
    tensor or bytearray constructed from a size (charged to ``budget``)."""
    name = _name(func)
    if type(args) is not tuple or not name:
        return
    if name == "torch._tensor._rebuild_from_type_v2" and len(args) > 2:
        check_torch_call(args[0], args[2], budget, **where)
    elif name in _OVER_STORAGE and len(args) >= 4:
        storage, offset, size, stride = args[:4]
        ints = (offset, *size, *stride) if type(size) is tuple and type(stride) is tuple else ("?",)
        if not isinstance(storage, StorageRecord) or not all(type(v) is int and v >= 0 for v in ints):
            return  # torch refuses these itself
        itemsize = _itemsize(args[6]) if name.endswith("_v3") and len(args) > 6 else storage.itemsize
        span = tensor_span(offset, size, stride) * (itemsize or 1)
        if span > storage.nbytes:
            raise ArchiveLimitError(
                f"a tensor of size {size[:8]} reaches {span} bytes into storage `{storage.key}` of "
                f"{storage.nbytes} bytes (torch would grow the storage); a saved tensor lies inside its storage.",
                **where,
            )
    elif name in ("builtins.bytearray", "builtins.bytes") or (
        name.startswith("torch.") and name.endswith(("Storage", "Tensor"))
    ):
        sizes = [a for a in args if type(a) is int]  # torch.FloatStorage(n), torch.FloatTensor(n, m)
        count = 1
        for n in sizes:
            count *= max(n, 0)
        if sizes:
            budget.charge(count * 16, f"`{name}` of {count} elements")
