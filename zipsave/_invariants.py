"""What every tensor a load returns is checked against, whichever door read it: a dense,
strided tensor whose view lies inside its storage, or a sparse tensor (COO, CSR, CSC, BSR,
BSC) whose invariants torch's own validators confirm. Every other kind is refused, naming the
key. One module, below every reader (``.pth`` members, pickled tensors in ``data``, DCP), so
every door checks alike; torch is imported only when a tensor is checked."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .exceptions import ArchiveFormatError

__all__ = [
    "SUPPORTED",
    "check_tensor",
    "check_tree",
    "flat_bytes",
    "keyed",
    "refusal",
    "validating_sparse",
    "view_fits",
    "walk",
]

SUPPORTED = "dense tensors and sparse COO, CSR, CSC, BSR and BSC tensors whose indices check out"


def keyed(err: ArchiveFormatError, key: str) -> ArchiveFormatError:
    """The key named in the message (wrappers quote the message) and kept as a field."""
    err.key = key or None
    return err


def refusal(key: str, what: str) -> ArchiveFormatError:
    return keyed(
        ArchiveFormatError(
            f"`{key or '<the member itself>'}` is {what}; zipsave loads only {SUPPORTED}.",
            hint="Re-save the value as a dense tensor (`.to_dense()`, `.dequantize()`) if it is yours.",
        ),
        key,
    )


def view_fits(offset: int, size: Any, stride: Any, itemsize: int, nbytes: int) -> bool:
    """Does the view (non-negative offset, sizes and strides, in elements) lie inside ``nbytes``
    bytes of storage? In Python integers, so no product overflows."""
    if offset < 0 or len(size) != len(stride) or any(n < 0 for n in size) or any(s < 0 for s in stride):
        return False
    return tensor_span(offset, size, stride) * itemsize <= nbytes


def tensor_span(offset: int, size: Any, stride: Any) -> int:
    """Elements of its storage a view reaches, from the storage's start: 0 when it is empty."""
    if any(n == 0 for n in size):
        return 0
    return offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))


def walk(tree: Any) -> Iterator[tuple[str, Any]]:
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
            items = list(enumerate(value))
        else:
            continue
        for k, v in reversed(items):
            stack.append((f"{path}.{k}" if path else str(k), v))


def check_tree(tree: Any) -> Any:
    """Check every tensor of a loaded tree (:func:`check_tensor`); returns ``tree``."""
    import torch

    for path, value in walk(tree):
        if isinstance(value, torch.Tensor):
            check_tensor(value, key=path)
        elif isinstance(value, (torch.storage.TypedStorage, torch.UntypedStorage)):
            raise refusal(path, "a bare storage, not a tensor")
    return tree


def check_tensor(t: Any, *, key: str = "") -> None:
    """Refuse ``t`` unless it is a dense strided tensor whose every element lies inside its
    storage (offset, sizes and strides non-negative, the last element within the storage's
    bytes), or a sparse tensor whose indices torch's validators accept and whose parts are
    such dense tensors."""
    import torch

    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise refusal(key, f"a tensor of type {type(t).__qualname__}")
    if t.is_meta:
        raise refusal(key, "a meta tensor (it has no data)")
    if t.is_quantized:
        raise refusal(key, "a quantized tensor")
    if t.is_nested:
        raise refusal(key, "a nested tensor")
    if t.layout == torch.strided:
        _check_dense(t, key)
    elif t.layout == torch.sparse_coo:
        _check_coo(t, key)
    elif t.layout in (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc):
        _check_compressed(t, key)
    else:
        raise refusal(key, f"a tensor of layout {t.layout}")


def _check_dense(t: Any, key: str) -> None:
    try:
        nbytes = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError) as err:
        raise refusal(key, f"a tensor without a plain storage ({err})") from None
    offset, size, stride = t.storage_offset(), tuple(t.shape), t.stride()
    if not view_fits(offset, size, stride, t.element_size(), nbytes):
        raise refusal(
            key, f"a view (size {size}, stride {stride}, offset {offset}) that reaches past its {nbytes}-byte storage"
        )


def _validate(check: Any, *args: Any, key: str) -> None:
    try:
        try:
            check(*args, check_pinning=False)  # torch >= 2.7; the pinning check is moot on load
        except TypeError:
            check(*args)
    except (RuntimeError, ValueError, IndexError, TypeError) as err:
        raise keyed(
            ArchiveFormatError(
                f"`{key}` is a sparse tensor whose indices are invalid ({str(err).splitlines()[0][:200]})."
            ),
            key,
        ) from None


def _check_coo(t: Any, key: str) -> None:
    import torch

    indices, values = t._indices(), t._values()
    if indices.dtype != torch.int64:
        raise refusal(key, f"a sparse COO tensor with {indices.dtype} indices")
    _check_dense(indices, key)
    _check_dense(values, key)
    _validate(torch._validate_sparse_coo_tensor_args, indices, values, t.size(), t.is_coalesced(), key=key)


def _check_compressed(t: Any, key: str) -> None:
    import torch

    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        compressed, plain = t.crow_indices(), t.col_indices()
    else:
        compressed, plain = t.ccol_indices(), t.row_indices()
    for part in (compressed, plain, t.values()):
        _check_dense(part, key)
    _validate(torch._validate_sparse_compressed_tensor_args, compressed, plain, t.values(), t.size(), t.layout, key=key)


@contextlib.contextmanager
def validating_sparse() -> Iterator[None]:
    """torch's own sparse-invariant checks on, for what ``torch.load`` builds inside."""
    import torch

    with torch.sparse.check_sparse_tensor_invariants(enable=True):
        yield


def flat_bytes(t: Any) -> Any:
    """A flat ``uint8`` view of a contiguous tensor's memory. torch calls a tensor whose
    dimensions of size 1 carry any stride contiguous (``torch.tensor(5).expand(1)`` has stride
    0), and refuses to view such a tensor as bytes: it is given unit strides first."""
    import torch

    flat = t.reshape(-1)
    if flat.numel() == 1 and flat.stride(0) != 1:
        flat = flat.as_strided((1,), (1,))
    return flat.view(torch.uint8)
