"""The tensor invariants (:mod:`zipsave._invariants`) applied to what the ``.pth`` metadata
reader describes: refused values named by key, sparse tensors assembled from checked parts
(torch imported only then: a metadata tree is checked without it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _tensors  # torch's layouts, on the first sparse tensor
from .._invariants import check_tensor, check_tree, keyed, refusal, validating_sparse, walk
from ..exceptions import ArchiveFormatError
from ._pth_dtypes import SPARSE_COO
from ._pth_refs import RefusedRef, SparseRef, StorageRef

if TYPE_CHECKING:
    import torch

__all__ = ["assemble_sparse", "check_tensor", "check_tree", "keyed", "refuse_refused", "validating_sparse"]


def refuse_refused(tree: Any) -> None:
    """Raise for the first :class:`RefusedRef` (or bare storage) of a metadata tree, naming its key."""
    for path, value in walk(tree):
        if isinstance(value, RefusedRef):
            raise refusal(path, value.what)
        if isinstance(value, StorageRef):
            raise refusal(path, "a bare storage, not a tensor")


def assemble_sparse(ref: SparseRef, parts: list[torch.Tensor], *, key: str = "") -> torch.Tensor:
    """The sparse tensor ``ref`` describes, from its loaded (dense, checked) ``parts``,
    refused unless its invariants hold."""
    import torch

    for part in parts:
        check_tensor(part, key=key)
    if ref.layout is SPARSE_COO and parts[0].dtype != torch.int64:
        raise refusal(key, f"a sparse COO tensor with {parts[0].dtype} indices")
    with validating_sparse():
        try:
            if ref.layout is SPARSE_COO:
                indices, values = parts
                out = torch.sparse_coo_tensor(
                    indices, values, ref.size, is_coalesced=ref.coalesced, check_invariants=False
                )
            else:
                compressed, plain, values = parts
                out = torch.sparse_compressed_tensor(
                    compressed, plain, values, ref.size, layout=_tensors.as_torch(ref.layout), check_invariants=False
                )
        except (RuntimeError, ValueError, TypeError, IndexError) as err:
            raise keyed(
                ArchiveFormatError(
                    f"`{key}` is a {ref.layout} tensor that cannot be assembled ({str(err).splitlines()[0][:200]})."
                ),
                key,
            ) from None
    check_tensor(out, key=key)
    if ref.parameter:
        return torch.nn.Parameter(out, requires_grad=ref.requires_grad)
    return out.requires_grad_(True) if ref.requires_grad else out
