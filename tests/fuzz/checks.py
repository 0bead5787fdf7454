"""What every fuzz target holds a returned value to, independently of zipsave's own checks:
every tensor can be summed, copied and densified without a crash, and no storage or array
holds more bytes than the input had (a value bigger than its source was filled from
somewhere else: the heap)."""

from __future__ import annotations

import io
import struct
import warnings
import zipfile
from typing import Any

import numpy as np
import torch

#: A sparse tensor is densified only up to this many bytes (a valid huge sparse tensor is no finding).
DENSE_MAX = 16 << 20


def leaves(tree: Any, depth: int = 0):
    if depth > 200:
        return
    if isinstance(tree, dict):
        for value in list(tree.values()):
            yield from leaves(value, depth + 1)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from leaves(value, depth + 1)
    else:
        yield tree


def use_tensor(t: torch.Tensor, input_size: int) -> None:
    if t.layout == torch.strided:
        if t.untyped_storage().nbytes() > input_size:
            raise AssertionError(f"a storage of {t.untyped_storage().nbytes()} bytes from {input_size} input bytes")
        t.clone().sum()
        t.contiguous().view(-1)
        return
    dense_bytes = t.numel() * t.element_size()
    if t.layout == torch.sparse_coo:
        t._indices().clone().sum()
        t._values().clone().sum()
        if dense_bytes <= DENSE_MAX:
            t.coalesce().to_dense().sum()
    else:
        compressed = t.crow_indices() if t.layout in (torch.sparse_csr, torch.sparse_bsr) else t.ccol_indices()
        compressed.clone().sum()
        t.values().clone().sum()
        if dense_bytes <= DENSE_MAX:
            t.to_dense().sum()


def use_array(a: np.ndarray, input_size: int) -> None:
    if a.nbytes > input_size:
        raise AssertionError(f"an array of {a.nbytes} bytes from {input_size} input bytes")
    a.copy()
    a.tobytes(order="A")


def use_tree(tree: Any, input_size: int) -> None:
    for leaf in leaves(tree):
        if isinstance(leaf, torch.Tensor):
            use_tensor(leaf, input_size)
        elif isinstance(leaf, np.ndarray):
            use_array(leaf, input_size)


def repaired(data: bytes, drop: tuple[str, ...] = ()) -> bytes | None:
    """``data``'s zip members (stored ones, as torch.save and zipsave write) but ``drop``
    re-written by zipfile with their CRC-32s right, or ``None`` where zipfile cannot list them."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()[:64]
    except Exception:
        return None
    out = io.BytesIO()
    try:
        with warnings.catch_warnings(), zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
            warnings.simplefilter("ignore")  # duplicate names stay duplicate: the reader must refuse them
            for info in infos:
                if info.filename in drop:
                    continue
                head = data[info.header_offset : info.header_offset + 30]
                if len(head) < 30 or info.compress_type != zipfile.ZIP_STORED or not info.filename:
                    return None
                start = info.header_offset + 30 + sum(struct.unpack("<HH", head[26:30]))
                dst.writestr(info.filename, data[start : start + info.compress_size])
    except Exception:  # what zipfile will not write is no input to the reader
        return None
    return out.getvalue()
