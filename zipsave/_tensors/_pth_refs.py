"""References to saved tensors, without their bytes: what the ``.pth`` metadata reader builds in
place of each tensor, and the leaves it builds for what zipsave refuses."""

from __future__ import annotations

import dataclasses

import torch

__all__ = ["RefusedRef", "SparseRef", "StorageRef", "TensorRef"]


@dataclasses.dataclass(frozen=True)
class StorageRef:
    key: str
    dtype: torch.dtype
    nbytes: int


@dataclasses.dataclass(frozen=True)
class TensorRef:
    """Where one saved tensor's bytes live, without the bytes."""

    storage: StorageRef
    offset: int  # in elements
    size: tuple[int, ...]
    stride: tuple[int, ...]
    requires_grad: bool
    parameter: bool = False
    #: Saved with hooks, metadata or attributes, which torch.load sets and the fast path cannot.
    extras: bool = False

    @property
    def dtype(self) -> torch.dtype:
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


@dataclasses.dataclass(frozen=True)
class SparseRef:
    """A saved sparse tensor: its index and value tensors (:class:`TensorRef` each, in
    ``torch._utils._rebuild_sparse_tensor``'s order) and its size; assembled, with every
    invariant checked, by :func:`~zipsave._tensors._invariants.assemble_sparse`."""

    layout: torch.layout
    parts: tuple[TensorRef, ...]
    size: tuple[int, ...]
    coalesced: bool | None = None
    requires_grad: bool = False
    parameter: bool = False

    @property
    def dtype(self) -> torch.dtype:
        return self.parts[-1].dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.size


@dataclasses.dataclass(frozen=True)
class RefusedRef:
    """A value of ``data.pkl`` that zipsave does not build (a quantized, nested or meta tensor,
    a tensor torch would allocate unfilled...): a leaf, so the refusal can name its key."""

    what: str
