"""Tensors: state dicts <-> ``.pth`` members and numpy arrays <-> ``.npy`` members, straight
between the archive file and tensor memory, and the device every tensor goes to."""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:  # what __getattr__ below imports on first use, spelled out for type checkers
    from ._arena import AnonymousMap, host_arena
    from ._copies import copy_storages, release_copies
    from ._device import as_torch, as_torch_tree, get_device, torch_dtype
    from ._invariants import check_tensor, check_tree
    from ._npy import (
        NpyHeader,
        fresh_copy,
        fresh_empty,
        read_array_header,
        read_array_member,
        read_array_member_into,
        read_array_once,
        read_npy,
    )
    from ._prefault import Prefaulter, stored_crc
    from ._pth_fallback import load_torch_bytes, torch_load
    from ._pth_meta import Damaged, PthMeta, RefusedRef, SparseRef, TensorRef, Unsupported, read_pth_meta
    from ._pth_mmap import mmap_tree
    from ._pth_read import load_member, load_pth
    from ._pth_records import check_member, check_stored_record, read_record, record_table
    from ._pth_write import WEIGHTS_ONLY_CONTAINERS, WEIGHTS_ONLY_LEAVES, check_weights_only, is_state_dict, save_pth
    from ._staging import Stager
    from ._tree import check_views, dotted, lookup, walk_leaves, walk_refs

# Each name's module, imported on first use (PEP 562), so that a load imports the modules it
# uses and not the whole package. ``{name: module}`` (``module:attribute`` where renamed).
_LAZY: dict[str, str] = {
    **dict.fromkeys(("AnonymousMap", "host_arena"), "._arena"),
    **dict.fromkeys(("copy_storages", "release_copies"), "._copies"),
    **dict.fromkeys(
        (
            "NpyHeader",
            "fresh_copy",
            "fresh_empty",
            "read_array_header",
            "read_array_member",
            "read_array_member_into",
            "read_array_once",
            "read_npy",
        ),
        "._npy",
    ),
    **dict.fromkeys(("Damaged", "PthMeta", "TensorRef", "Unsupported", "read_pth_meta"), "._pth_meta"),
    **dict.fromkeys(("load_member", "load_pth"), "._pth_read"),
    **dict.fromkeys(("check_member", "check_stored_record", "read_record", "record_table"), "._pth_records"),
    **dict.fromkeys(("as_torch", "as_torch_tree", "torch_dtype"), "._device"),
    "get_device": "._device",
    **dict.fromkeys(
        ("WEIGHTS_ONLY_CONTAINERS", "WEIGHTS_ONLY_LEAVES", "check_weights_only", "is_state_dict", "save_pth"),
        "._pth_write",
    ),
    **dict.fromkeys(("check_views", "dotted", "walk_refs"), "._tree"),
    "mmap_tree": "._pth_mmap",
    **dict.fromkeys(("Prefaulter", "stored_crc"), "._prefault"),
    "Stager": "._staging",
    "RefusedRef": "._pth_meta",
    "SparseRef": "._pth_meta",
    "check_tensor": "._invariants",
    "check_tree": "._invariants",
    "load_torch_bytes": "._pth_fallback",
    "lookup": "._tree",
    "torch_load": "._pth_fallback",
    "walk_leaves": "._tree",
}
# Its modules, found as attributes as when this file imported them all.
_SUBMODULES = frozenset(
    {
        "_arena",
        "_copies",
        "_device",
        "_invariants",
        "_npy",
        "_prefault",
        "_pth_fallback",
        "_pth_dtypes",
        "_pth_meta",
        "_pth_mmap",
        "_pth_read",
        "_pth_records",
        "_pth_refs",
        "_pth_vocab",
        "_pth_write",
        "_staging",
        "_tree",
    }
)

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES)

__all__ = [
    "AnonymousMap",
    "host_arena",
    "NpyHeader",
    "read_array_header",
    "read_array_member_into",
    "PthMeta",
    "RefusedRef",
    "SparseRef",
    "check_tensor",
    "check_views",
    "check_tree",
    "load_torch_bytes",
    "torch_load",
    "check_member",
    "check_stored_record",
    "as_torch",
    "as_torch_tree",
    "torch_dtype",
    "copy_storages",
    "release_copies",
    "TensorRef",
    "Unsupported",
    "Damaged",
    "dotted",
    "fresh_copy",
    "fresh_empty",
    "get_device",
    "load_member",
    "load_pth",
    "read_array_member",
    "read_array_once",
    "read_npy",
    "read_pth_meta",
    "read_record",
    "record_table",
    "save_pth",
    "is_state_dict",
    "check_weights_only",
    "WEIGHTS_ONLY_CONTAINERS",
    "WEIGHTS_ONLY_LEAVES",
    "lookup",
    "mmap_tree",
    "Stager",
    "Prefaulter",
    "stored_crc",
    "walk_leaves",
    "walk_refs",
]
