"""What every tensor a load returns is checked against, whichever reader built it: a dense,
strided tensor whose view lies inside its storage, or a sparse tensor (COO, CSR, CSC, BSR,
BSC) whose invariants torch's own validators confirm. Every other kind is refused, naming
the key. One module, so every door (``.pth`` members, DCP, pickled tensors) checks alike."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from ..exceptions import ArchiveFormatError
from ._pth_meta import RefusedRef, SparseRef, StorageRef

__all__ = ["assemble_sparse", "keyed", "check_tensor", "check_tree", "refuse_refused", "validating_sparse"]

_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
_SUPPORTED = "dense tensors and sparse COO, CSR, CSC, BSR and BSC tensors whose indices check out"


def _refuse(key: str, what: str) -> ArchiveFormatError:
    return keyed(ArchiveFormatError(
        f"`{key or '<the member itself>'}` is {what}; zipsave loads only {_SUPPORTED}.",
        hint="Re-save the value as a dense tensor (`.to_dense()`, `.dequantize()`) if it is yours.",
    ), key)


def keyed(err: ArchiveFormatError, key: str) -> ArchiveFormatError:
    """The key named in the message (wrappers quote the message) and kept as a field."""
    err.key = key or None
    return err


def _walk(tree: Any) -> Iterator[tuple[str, Any]]:
    """Every value of a loaded tree with its dotted key, iteratively (a deep tree is data)."""
    stack: list[tuple[str, Any]] = [("", tree)]
    while stack:
        path, value = stack.pop()
        yield path, value
        if isinstance(value, dict):
            items = list(value.items())
        elif isinstance(value, (list, tuple)):
            items = list(enumerate(value))
        elif isinstance(value, (set, frozenset)):
            items = [(i, v) for i, v in enumerate(value)]
        else:
            continue
        for k, v in reversed(items):
            stack.append((f"{path}.{k}" if path else str(k), v))


def refuse_refused(tree: Any) -> None:
    """Raise for the first :class:`RefusedRef` of a metadata tree, naming its key."""
    for path, value in _walk(tree):
        if isinstance(value, RefusedRef):
            raise _refuse(path, value.what)
        if isinstance(value, StorageRef):
            raise _refuse(path, "a bare storage, not a tensor")


def check_tree(tree: Any) -> Any:
    """Check every tensor of a loaded tree (:func:`check_tensor`); returns ``tree``."""
    for path, value in _walk(tree):
        if isinstance(value, torch.Tensor):
            check_tensor(value, key=path)
        elif isinstance(value, (torch.storage.TypedStorage, torch.UntypedStorage)):
            raise _refuse(path, "a bare storage")
    return tree


def check_tensor(t: torch.Tensor, *, key: str = "") -> None:
    """Refuse ``t`` unless it is a dense strided tensor whose every element lies inside its
    storage (offset, sizes and strides non-negative, the last element within the storage's
    bytes), or a sparse tensor whose indices torch's validators accept and whose parts are
    such dense tensors."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise _refuse(key, f"a tensor of type {type(t).__qualname__}")
    if t.is_meta or t.device.type == "meta":
        raise _refuse(key, "a meta tensor (it has no data)")
    if t.is_quantized:
        raise _refuse(key, "a quantized tensor")
    if t.is_nested:
        raise _refuse(key, "a nested tensor")
    if t.layout == torch.strided:
        _check_dense(t, key)
    elif t.layout == torch.sparse_coo:
        _check_coo(t, key)
    elif t.layout in _COMPRESSED:
        _check_compressed(t, key)
    else:
        raise _refuse(key, f"a tensor of layout {t.layout}")


def _check_dense(t: torch.Tensor, key: str) -> None:
    try:
        nbytes = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError) as err:
        raise _refuse(key, f"a tensor without a plain storage ({err})") from None
    offset, size, stride = t.storage_offset(), tuple(t.shape), t.stride()
    if offset < 0 or any(n < 0 for n in size) or any(s < 0 for s in stride):
        raise _refuse(key, f"a tensor of size {size}, stride {stride} and offset {offset}")
    if t.numel() == 0:
        return
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if (last + 1) * t.element_size() > nbytes:
        raise _refuse(
            key, f"a view (size {size}, stride {stride}, offset {offset}) that reaches past its {nbytes}-byte storage"
        )


def _validate(check: Any, *args: Any, key: str) -> None:
    try:
        try:
            check(*args, check_pinning=False)  # torch >= 2.7; the pinning check is moot on load
        except TypeError:
            check(*args)
    except (RuntimeError, ValueError, IndexError, TypeError) as err:
        raise keyed(ArchiveFormatError(
            f"`{key}` is a sparse tensor whose indices are invalid ({str(err).splitlines()[0][:200]})."
        ), key) from None


def _check_coo(t: torch.Tensor, key: str) -> None:
    indices, values = t._indices(), t._values()
    if indices.dtype != torch.int64:
        raise _refuse(key, f"a sparse COO tensor with {indices.dtype} indices")
    _check_dense(indices, key)
    _check_dense(values, key)
    _validate(torch._validate_sparse_coo_tensor_args, indices, values, t.size(), t.is_coalesced(), key=key)


def _check_compressed(t: torch.Tensor, key: str) -> None:
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        compressed, plain = t.crow_indices(), t.col_indices()
    else:
        compressed, plain = t.ccol_indices(), t.row_indices()
    for part in (compressed, plain, t.values()):
        _check_dense(part, key)
    _validate(torch._validate_sparse_compressed_tensor_args, compressed, plain, t.values(), t.size(), t.layout, key=key)


def assemble_sparse(ref: SparseRef, parts: list[torch.Tensor], *, key: str = "") -> torch.Tensor:
    """The sparse tensor ``ref`` describes, from its loaded (dense, checked) ``parts``,
    refused unless its invariants hold."""
    for part in parts:
        _check_dense(part, key)
    with validating_sparse():
        try:
            if ref.layout == torch.sparse_coo:
                indices, values = parts
                if indices.dtype != torch.int64:
                    raise _refuse(key, f"a sparse COO tensor with {indices.dtype} indices")
                out = torch.sparse_coo_tensor(indices, values, ref.size, is_coalesced=ref.coalesced, check_invariants=False)
            else:
                compressed, plain, values = parts
                out = torch.sparse_compressed_tensor(compressed, plain, values, ref.size, layout=ref.layout,
                                                     check_invariants=False)
        except (RuntimeError, ValueError, TypeError, IndexError) as err:
            raise keyed(ArchiveFormatError(
                f"`{key}` is a {ref.layout} tensor that cannot be assembled ({str(err).splitlines()[0][:200]})."
            ), key) from None
    check_tensor(out, key=key)
    if ref.parameter:
        return torch.nn.Parameter(out, requires_grad=ref.requires_grad)
    return out.requires_grad_(True) if ref.requires_grad else out


@contextlib.contextmanager
def validating_sparse() -> Iterator[None]:
    """torch's own sparse-invariant checks on, for what ``torch.load`` builds inside."""
    with torch.sparse.check_sparse_tensor_invariants(enable=True):
        yield
