"""Walking a state-dict tree of tensor references (and checking that every view lies inside its
storage record), and byte views of tensors for ``readinto``."""

from __future__ import annotations

import collections
import io
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .. import _tensors  # torch's objects for the reader's stand-ins, where tensors are built
from .._invariants import flat_bytes, refusal
from ..exceptions import ArchiveFormatError
from ._invariants import assemble_sparse, keyed, refuse_refused
from ._pth_meta import RefusedRef, SparseRef, TensorRef
from ._pth_refs import StorageRef

if TYPE_CHECKING:
    import torch

__all__ = [
    "NAMED",
    "BufferView",
    "byte_view",
    "check_views",
    "dotted",
    "lookup",
    "named",
    "replace",
    "walk_leaves",
    "walk_refs",
]


class BufferView(io.RawIOBase):
    """A small member held in memory, with the reading interface of a ``MemberView``."""

    def __init__(self, data: bytearray) -> None:
        super().__init__()
        self._data = memoryview(data)
        self.size = len(data)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def read_at(self, offset: int, buf: Any) -> int:
        view = memoryview(buf).cast("B")
        n = max(0, min(view.nbytes, self.size - offset))
        view[:n] = self._data[offset : offset + n]
        return n

    def readinto(self, buf: Any) -> int:
        n = self.read_at(self._pos, buf)
        self._pos += n
        return n


# -- trees ---------------------------------------------------------------------------------
def walk_leaves(tree: Any, leaf: type | tuple[type, ...], path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    if isinstance(tree, leaf):
        yield path, tree
    elif isinstance(tree, SparseRef):  # its index and value tensors, under the tensor's key
        for i, part in enumerate(tree.parts):
            yield from walk_leaves(part, leaf, path + (i,))
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from walk_leaves(v, leaf, path + (k,))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from walk_leaves(v, leaf, path + (i,))


def walk_refs(tree: Any, path: tuple = ()) -> Iterator[tuple[tuple, TensorRef]]:
    """Every :class:`TensorRef` of a metadata tree, with its path of keys / indices."""
    return walk_leaves(tree, TensorRef, path)


def lookup(tree: Any, path: tuple) -> Any:
    for part in path:
        if isinstance(tree, dict):
            if part not in tree:
                return None
            tree = tree[part]
        elif isinstance(tree, (list, tuple)) and isinstance(part, int) and part < len(tree):
            tree = tree[part]
        else:
            return None
    return tree


def replace(tree: Any, build: Callable[[TensorRef], Any], *, torch_values: bool = False) -> Any:
    """``tree`` with every :class:`TensorRef` built by ``build``, and every sparse tensor
    assembled from its built parts (its invariants checked). A tensor the pickle holds once is
    built once, however many keys name it: one object, as ``torch.load`` gives it (tied
    weights share the object, not only the storage). With ``torch_values``
    (:attr:`~._pth_meta.PthMeta.torch_values`) the dtypes, layouts and quantization schemes
    it holds as values become torch's own."""
    built = _replace(tree, build, (), {})
    return _tensors.as_torch_tree(built) if torch_values else built


def _replace(tree: Any, build: Callable[[TensorRef], Any], path: tuple, built: dict[int, Any]) -> Any:
    if isinstance(tree, (TensorRef, SparseRef)):
        if id(tree) not in built:
            if isinstance(tree, TensorRef):
                built[id(tree)] = build(tree)
            else:
                parts = [_replace(part, build, path, built) for part in tree.parts]
                built[id(tree)] = assemble_sparse(tree, parts, key=dotted(path))
        return built[id(tree)]
    if isinstance(tree, dict):
        # the kind the pickle built (a Counter counts a missing key as 0, an OrderedDict moves keys)
        out = type(tree)() if type(tree) in _DICT_KINDS else {}
        for k, v in tree.items():
            out[k] = _replace(v, build, path + (k,), built)
        if hasattr(tree, "_metadata"):
            out._metadata = _plain_metadata(tree._metadata, path)  # type: ignore[attr-defined]
        return out
    if isinstance(tree, list):
        return [_replace(v, build, path + (i,), built) for i, v in enumerate(tree)]
    if isinstance(tree, tuple):
        items = tuple(_replace(v, build, path + (i,), built) for i, v in enumerate(tree))
        # a tuple of another kind holding no tensor (torch.Size) stays what the pickle built
        return tree if type(tree) is not tuple and all(a is b for a, b in zip(items, tree)) else items
    return tree


def _plain_metadata(metadata: Any, path: tuple) -> Any:
    """A state dict's ``_metadata`` (``{prefix: {"version": n}}``, which ``load_state_dict``
    reads) as the pickle built it, refused if it holds a tensor or a storage: the reader builds
    and checks the tensors of a state dict's items only, and would hand back its own placeholder
    for one there."""
    for where, _ in walk_leaves(metadata, (TensorRef, SparseRef, StorageRef, RefusedRef), path + ("_metadata",)):
        raise refusal(dotted(where), "a tensor in a state dict's `_metadata`, which holds versions only")
    return metadata


#: The dicts a ``.pth`` pickle builds (``torch.load(weights_only=True)`` builds these too).
_DICT_KINDS = (dict, collections.OrderedDict, collections.Counter)


def dotted(path: tuple) -> str:
    return ".".join(map(str, path))


#: How many keys an error names before it counts the rest: a hostile pickle may name one
#: storage under a million keys.
NAMED = 8


def named(paths: Iterable[tuple]) -> str:
    """The first :data:`NAMED` of ``paths``, quoted and dotted, and how many more there are."""
    paths = list(paths)
    listed = ", ".join(f"`{dotted(path)}`" for path in paths[:NAMED])
    return listed + (f" and {len(paths) - NAMED} more" if len(paths) > NAMED else "")


def check_views(tree: Any, lengths: dict[str, int] | None = None) -> None:
    """Refuse a metadata tree with a refused value, or a tensor whose view reaches past its
    storage (``lengths``: each storage record's bytes; else the sizes ``data.pkl`` declares,
    which torch checks against the records)."""
    refuse_refused(tree)
    declared: dict[str, int] = {}
    checked: set[int] = set()  # a tensor under many keys is one view to check
    for path, ref in walk_refs(tree):
        if id(ref) in checked:
            continue
        checked.add(id(ref))
        key = ref.storage.key
        length = lengths.get(key) if lengths is not None else declared.setdefault(key, ref.storage.nbytes)
        name = dotted(path)
        if length is None:
            raise keyed(ArchiveFormatError(f"`{name}`: data.pkl names storage record `{key}`, which is missing."), name)
        if ref.storage.nbytes != length:  # torch.load refuses a record of another size too
            raise keyed(
                ArchiveFormatError(
                    f"`{name}`: data.pkl declares storage `{key}` of {ref.storage.nbytes} bytes; "
                    + (f"its record holds {length}." if lengths is not None else f"elsewhere of {length}.")
                ),
                name,
            )
        if ref.offset * ref.dtype.itemsize + ref.extent > length:
            raise keyed(
                ArchiveFormatError(
                    f"`{name}` is a view (size {ref.size}, stride {ref.stride}, offset {ref.offset}) that reaches "
                    f"past its {length}-byte storage record `{key}`."
                ),
                name,
            )


# -- destinations --------------------------------------------------------------------------
def byte_view(t: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's memory."""
    return flat_bytes(t.detach()).numpy().data.cast("B")
