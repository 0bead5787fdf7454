"""What every tensor a load returns is checked against, whichever door read it: a dense,
strided tensor whose view lies inside its storage, or a sparse tensor (COO, CSR, CSC, BSR,
BSC) whose invariants torch's own validators confirm. Every other kind is refused, naming the
key. One module, below every reader (``.pth`` members, pickled tensors in ``data``, DCP), so
every door checks alike; torch is imported only when a tensor is checked."""

from __future__ import annotations

import collections
import contextlib
import math
import sys
import types
from collections.abc import Iterator
from typing import Any

from .exceptions import ArchiveFormatError, ArchiveLimitError

__all__ = [
    "MAX_TREE_DEPTH",
    "SUPPORTED",
    "VIEW_FLOOR",
    "VIEW_RATIO",
    "array_objects",
    "check_structure",
    "check_tensor",
    "check_tree",
    "flat_bytes",
    "keyed",
    "quantized_dtypes",
    "refusal",
    "validating_sparse",
    "view_fits",
    "walk",
]

#: How deeply the containers of a tensor member's tree may nest. A state dict nests a few
#: levels; zipsave's walkers recurse, and 200 levels keep them clear of the recursion limit.
MAX_TREE_DEPTH = 200

#: A tree whose containers are shared (one object under several keys, as a pickle's memo allows)
#: is refused when a walk of all its paths would visit more than this many values and more than
#: :data:`_SHARING` times the values it holds: 60 lists each holding the one below twice, 2**61.
_PATHS_FLOOR = 1 << 18
_SHARING = 16

_FOREIGN_HINT = "torch.save of a state dict writes no such tree; the member is damaged or was made to break readers."
_CYCLE_HINT = (
    "No value SB3, gymnasium, numpy or torch pickles refers back to itself, and zipsave's walkers "
    "(diff, SB3's checks) need values that do not; if the archive is yours and a class of yours "
    "holds such a reference, load with allow_pickle=True."
)
_PICKLED_HINT = (
    "No value a program pickles has this shape: printing, comparing or copying it would never finish. "
    "The entry is damaged or was made to break readers."
)

#: The bytes a dense tensor stands for (its elements times their size) may exceed its storage's
#: only by this floor plus this many times the storage's bytes: the allocation budget of
#: ``zipsave._bounds`` (64 MiB + 16x), which a use of the tensor (a sum, a copy, ``==``, ``zipsave
#: diff``) takes in time or memory. A view may read its storage many times over (a zero stride,
#: ``expand``), and a 4-byte storage under stride 0 stood for 2**62 elements whose sum never ends;
#: a zero dimension counts as 1 (``(2**62, 0)``: 2**62 rows for ``tolist()`` and iteration).
VIEW_FLOOR = 64 << 20
VIEW_RATIO = 16

_SUB_BYTE = frozenset(f"torch.{sign}int{bits}" for sign in ("", "u") for bits in range(1, 8))
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
    """Every value of a loaded tree with its dotted key, depth first, without recursion (a deep
    tree is data) and in memory that grows with the tree's depth only: a million-item list is
    walked one item at a time, each key spelled as it is reached."""
    yield "", tree
    children = _children(tree)
    if children is None:
        return
    stack: list[tuple[str, Iterator[tuple[Any, Any]]]] = [("", children)]
    while stack:
        prefix, items = stack[-1]
        for key, value in items:
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path, value
            below = _children(value)
            if below is not None:
                stack.append((path, below))
                break
        else:
            stack.pop()


def _children(value: Any) -> Iterator[tuple[Any, Any]] | None:
    if isinstance(value, dict):
        return iter(value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return enumerate(value)
    return None


_CONTAINERS = (dict, list, tuple, set, frozenset)
#: Values with nothing below them in an object graph, found by type at once.
_ATOMS = frozenset({str, bytes, bytearray, int, float, complex, bool, type(None), range})
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _tree_children(value: Any) -> list:
    """A tree's container's children (a dict's keys, which paths spell; a state dict's ``_metadata``)."""
    attributes = () if type(value) is dict or not isinstance(value, dict) else (_state(value) or {}).values()
    return [*value, *value.values(), *attributes] if isinstance(value, dict) else list(value)


def _is_tree_node(value: Any) -> bool:
    return isinstance(value, _CONTAINERS)


def _object_children(value: Any) -> list:
    """What ``repr``, ``==`` or a walk reaches below an object a pickle built: a container's
    items (and keys), a deque's, a slice's parts, an object array's elements and an
    instance's attributes (``SimpleNamespace``, a space, a module created empty)."""
    kind = type(value)
    if kind in _BARE:  # the common case: no attributes to look for
        return [*value, *value.values()] if kind is dict else list(value)
    if isinstance(value, dict):
        found = [*value, *value.values()]
    elif isinstance(value, (list, tuple, set, frozenset, collections.deque)):
        found = list(value)
    elif kind is slice:
        found = [value.start, value.stop, value.step]
    elif _is_object_array(value):
        found = array_objects(value)
    else:
        found = []
    state = _state(value)
    return found + list(state.values()) if state else found


#: Containers whose instances carry no attributes.
_BARE = frozenset({dict, list, tuple, set, frozenset, collections.deque})


def _is_object_node(value: Any) -> bool:
    kind = type(value)
    if kind in _ATOMS:
        return False
    if kind in _BARE:
        return bool(value)  # an empty one is a plain value to a walk
    if kind is slice or isinstance(value, _CONTAINERS) or _is_object_array(value):
        return True
    return bool(_state(value))


def _is_object_array(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray) and value.dtype.hasobject


def array_objects(value: Any) -> list:
    """The objects an array of a dtype that holds objects holds: its elements, and the fields
    of a structured one's records (``tolist`` gives them as tuples, a subarray field as lists)."""
    items = value.ravel(order="K").tolist()
    if value.dtype.names is None:
        return items
    found: list[Any] = []
    todo = [items]
    while todo:
        for item in todo.pop():
            if type(item) in (tuple, list):
                todo.append(item)
            else:
                found.append(item)
    return found


def _state(value: Any) -> dict | None:
    """An instance's own ``__dict__`` (never a class's, a module's or a function's)."""
    if isinstance(value, _OPAQUE):
        return None
    try:
        state = object.__getattribute__(value, "__dict__")
    except (AttributeError, TypeError):
        return None
    return state if type(state) is dict else None


def _frame(value: Any, children_of: Any, is_node: Any) -> list:
    """A walk's frame for the container ``value``: ``[value, its child containers, the next of
    them, the values its walk visits so far (itself and its other children), its children]``."""
    children = children_of(value)
    inner = [child for child in children if type(child) not in _ATOMS and is_node(child)]  # no call for a number
    return [value, inner, 0, 1 + len(children) - len(inner), len(children)]


def check_structure(tree: Any, *, objects: bool = False, **where: Any) -> Any:
    """Refuse a loaded tree that a walk of its paths could not finish: a container inside
    itself (a cycle), containers nested past :data:`MAX_TREE_DEPTH`, or shared containers that
    multiply its paths (see :data:`_PATHS_FLOOR`). Linear in the distinct values (a shared
    container's items are listed once), without recursion; returns ``tree``.

    With ``objects=True`` the walk is the one ``repr``, ``==`` and ``copy.deepcopy`` make of
    what a pickle built (:func:`_object_children`): 60 ``SimpleNamespace`` objects each holding
    the one below twice are 700 bytes of pickle whose ``repr`` would visit 2**61 values.
    ``where`` (``archive``, ``member``, ``key``) goes into the error."""
    children_of, is_node = (_object_children, _is_object_node) if objects else (_tree_children, _is_tree_node)
    hint = _PICKLED_HINT if objects else _FOREIGN_HINT
    if not is_node(tree):
        return tree
    finished: dict[int, int] = {}  # id of a container walked -> the values a walk of it visits
    frames = [_frame(tree, children_of, is_node)]
    active = {id(tree)}
    held = frames[0][4]
    while frames:
        frame = frames[-1]
        if frame[2] < len(frame[1]):
            child = frame[1][frame[2]]
            frame[2] += 1
            if id(child) in finished:
                frame[3] += finished[id(child)]
            elif id(child) in active:
                raise ArchiveFormatError(
                    "holds a container that contains itself (a cycle).",
                    hint=_CYCLE_HINT if objects else hint,
                    **where,
                )
            elif len(frames) >= MAX_TREE_DEPTH:
                raise ArchiveFormatError(f"nests containers deeper than {MAX_TREE_DEPTH} levels.", hint=hint, **where)
            else:
                inner = _frame(child, children_of, is_node)
                held += inner[4]
                if inner[1]:
                    active.add(id(child))
                    frames.append(inner)
                else:  # only plain values below (a parameter's state): finished at once
                    finished[id(child)] = inner[3]
                    frame[3] += inner[3]
            continue
        frames.pop()
        active.discard(id(frame[0]))
        finished[id(frame[0])] = frame[3]
        if frames:
            frames[-1][3] += frame[3]
    visits = finished[id(tree)]
    if visits > max(_PATHS_FLOOR, _SHARING * held):
        raise ArchiveLimitError(
            f"shares containers so that walking its {held} values would visit {visits}.", hint=hint, **where
        )
    return tree


def check_tree(tree: Any) -> Any:
    """Check a loaded tree's shape (:func:`check_structure`) and every tensor in it
    (:func:`check_tensor`); returns ``tree``."""
    import torch

    check_structure(tree)
    checked: set[int] = set()  # a tensor under many keys (tied weights) is checked once
    for path, value in walk(tree):
        if isinstance(value, torch.Tensor):
            if id(value) not in checked:
                check_tensor(value, key=path)
                checked.add(id(value))
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
    if t.dtype in quantized_dtypes():
        # a plain tensor viewed as qint8...: no quantizer, so its repr and every operation fail
        raise refusal(key, f"a tensor of the quantized dtype {t.dtype} (without the quantizer to read it)")
    if str(t.dtype) in _SUB_BYTE:  # torch.save cannot write one; no operation (repr, clone, ==) reads it
        raise refusal(key, f"a tensor of the sub-byte dtype {t.dtype}, which torch writes none of and cannot read")
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


def quantized_dtypes() -> frozenset:
    """torch's quantized dtypes (``qint8``...): only a quantized tensor, with its quantizer,
    can be read as them."""
    import torch

    names = ("qint8", "quint8", "qint32", "quint4x2", "quint2x4")
    return frozenset(getattr(torch, name) for name in names if hasattr(torch, name))


def _check_dense(t: Any, key: str) -> None:
    import torch

    try:
        nbytes = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError) as err:
        raise refusal(key, f"a tensor without a plain storage ({err})") from None
    offset, size, stride = t.storage_offset(), tuple(t.shape), t.stride()
    if not view_fits(offset, size, stride, t.element_size(), nbytes):
        raise refusal(
            key, f"a view (size {size}, stride {stride}, offset {offset}) that reaches past its {nbytes}-byte storage"
        )
    stands_for = math.prod(max(n, 1) for n in size) * t.element_size()  # a zero-size one: the rows tolist() makes
    if stands_for > VIEW_FLOOR + VIEW_RATIO * nbytes:
        raise keyed(
            ArchiveLimitError(
                f"`{key or '<the member itself>'}` is a view (size {size[:8]}, stride {stride[:8]}) of "
                f"{stands_for} bytes over a {nbytes}-byte storage: more than {VIEW_FLOOR} plus {VIEW_RATIO} "
                "times its storage, which every use of it (a sum, a copy, a comparison) would read or allocate.",
                hint="torch.save of a tensor expanded this far writes such a view; save `.contiguous()` instead.",
            ),
            key,
        )
    if t.dtype is torch.bool and t.numel() and bool(t.view(torch.uint8).max() > 1):
        raise refusal(key, "a bool tensor holding a byte other than 0 or 1 (undefined in torch, never written by it)")


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
