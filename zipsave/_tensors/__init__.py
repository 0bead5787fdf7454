"""Tensors: state dicts <-> ``.pth`` members and numpy arrays <-> ``.npy`` members, straight
between the archive file and tensor memory, and the device every tensor goes to."""

from ._arena import AnonymousMap
from ._npy import NpyHeader, fresh_copy, read_array_header, read_array_member, read_array_member_into, read_npy
from ._invariants import check_tensor, check_tree
from ._pth_fallback import load_torch_bytes, torch_load
from ._pth_meta import Damaged, PthMeta, RefusedRef, SparseRef, TensorRef, Unsupported, read_pth_meta
from ._pth_read import load_member, load_pth
from ._pth_records import check_member, read_record, record_table
from ._pth_write import get_device, save_pth
from ._tree import dotted, lookup, walk_leaves, walk_refs

__all__ = [
    "AnonymousMap",
    "NpyHeader",
    "read_array_header",
    "read_array_member_into",
    "PthMeta",
    "RefusedRef",
    "SparseRef",
    "check_tensor",
    "check_tree",
    "load_torch_bytes",
    "torch_load",
    "check_member",
    "TensorRef",
    "Unsupported",
    "Damaged",
    "dotted",
    "fresh_copy",
    "get_device",
    "load_member",
    "load_pth",
    "read_array_member",
    "read_npy",
    "read_pth_meta",
    "read_record",
    "record_table",
    "save_pth",
    "lookup",
    "walk_leaves",
    "walk_refs",
]
