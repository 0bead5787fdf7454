"""References to saved tensors, without their bytes: what the ``.pth`` metadata reader builds in
place of each tensor, and the leaves it builds for what zipsave refuses."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._pth_dtypes import DType, TorchName

__all__ = ["RefusedRef", "SparseRef", "StorageRef", "TensorRef"]


class _Frozen:
    """What ``@dataclass(frozen=True)`` would generate for these records, written out: building
    four dataclasses (their methods compiled from source) cost every first load about 2 ms.
    Fields are set once in ``__init__``; value equality, hashing, a dataclass-style repr, and
    :meth:`replace` for a changed copy."""

    _fields: tuple[str, ...] = ()

    def _values(self) -> tuple:
        return tuple(self.__dict__[name] for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={self.__dict__[name]!r}" for name in self._fields)
        return f"{type(self).__qualname__}({fields})"

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        values = {name: self.__dict__[name] for name in self._fields}
        values.update(changes)
        return type(self)(**values)


class StorageRef(_Frozen):
    """One storage record of a ``.pth`` member: its key, dtype (a stand-in of torch's,
    :mod:`._pth_dtypes`) and size in bytes."""

    _fields = ("key", "dtype", "nbytes")
    key: str
    dtype: DType
    nbytes: int

    def __init__(self, key: str, dtype: DType, nbytes: int) -> None:
        self.__dict__.update(key=key, dtype=dtype, nbytes=nbytes)


class TensorRef(_Frozen):
    """Where one saved tensor's bytes live, without the bytes."""

    _fields = ("storage", "offset", "size", "stride", "requires_grad", "parameter", "extras")
    storage: StorageRef
    offset: int  # in elements
    size: tuple[int, ...]
    stride: tuple[int, ...]
    requires_grad: bool
    parameter: bool
    #: Saved with hooks, metadata or attributes, which torch.load sets and the fast path cannot.
    extras: bool

    def __init__(
        self,
        storage: StorageRef,
        offset: int,
        size: tuple[int, ...],
        stride: tuple[int, ...],
        requires_grad: bool,
        parameter: bool = False,
        extras: bool = False,
    ) -> None:
        self.__dict__.update(
            storage=storage,
            offset=offset,
            size=size,
            stride=stride,
            requires_grad=requires_grad,
            parameter=parameter,
            extras=extras,
        )

    @property
    def dtype(self) -> DType:
        return self.storage.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.size

    @property
    def numel(self) -> int:
        n = 1
        for s in self.size:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def extent(self) -> int:
        """Bytes of the storage this tensor spans, from its first element."""
        if self.numel == 0:
            return 0
        return (1 + sum((n - 1) * s for n, s in zip(self.size, self.stride))) * self.dtype.itemsize

    def is_contiguous(self) -> bool:
        expected = 1
        for size, stride in zip(reversed(self.size), reversed(self.stride)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


class SparseRef(_Frozen):
    """A saved sparse tensor: its index and value tensors (:class:`TensorRef` each, in
    ``torch._utils._rebuild_sparse_tensor``'s order) and its size; assembled, with every
    invariant checked, by :func:`~zipsave._tensors._invariants.assemble_sparse`."""

    _fields = ("layout", "parts", "size", "coalesced", "requires_grad", "parameter")
    layout: TorchName
    parts: tuple[TensorRef, ...]
    size: tuple[int, ...]
    coalesced: bool | None
    requires_grad: bool
    parameter: bool

    def __init__(
        self,
        layout: TorchName,
        parts: tuple[TensorRef, ...],
        size: tuple[int, ...],
        coalesced: bool | None = None,
        requires_grad: bool = False,
        parameter: bool = False,
    ) -> None:
        self.__dict__.update(
            layout=layout,
            parts=parts,
            size=size,
            coalesced=coalesced,
            requires_grad=requires_grad,
            parameter=parameter,
        )

    @property
    def dtype(self) -> DType:
        return self.parts[-1].dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.size


class RefusedRef(_Frozen):
    """A value of ``data.pkl`` that zipsave does not build (a quantized, nested or meta tensor,
    a tensor torch would allocate unfilled...): a leaf, so the refusal can name its key."""

    _fields = ("what",)
    what: str

    def __init__(self, what: str) -> None:
        self.__dict__["what"] = what
