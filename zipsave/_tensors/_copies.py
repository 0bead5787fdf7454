"""Copies of host tensor storages for background saves, made into memory kept resident from one
save to the next, so that the copy in the training thread is a ``memcpy`` and not page faults.

A background save copies every tensor before it returns. Into fresh memory (``storage.clone``)
most of that time was the page faults that back the new pages, not the copy: on the benchmark
machine (a virtual machine) 27 MB of a DQN's weights and Adam state took 10-33 ms of CPU to
clone and 2-4 ms to copy into pages already resident. :func:`copy_storages` puts the copies of
one save side by side in one anonymous mapping; with ``keep`` the mapping is not unmapped when
the last copy over it is freed (the save has written) but kept, resident, for the next save of
about its size (at most :data:`KEEP` of them). :func:`release_copies` gives them back.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence

import numpy as np
import torch

from ._arena import ALIGN, AnonymousMap, aligned_offsets, fresh_map

__all__ = ["COPY_MIN", "KEEP", "copy_storages", "release_copies"]

#: Copies that total less than this (and those of a save that keeps nothing) go into the C
#: allocator's memory, neither mapped nor kept.
COPY_MIN = 1 << 20
#: How many mappings are kept for the next saves (one per model saved in turn).
KEEP = 1

_lock = threading.Lock()
_kept: list[AnonymousMap] = []  # most recently freed last
_kept_pid = os.getpid()  # a forked child shares these pages copy-on-write: it keeps none of them


def _give_back(arena: AnonymousMap) -> None:
    """The last copy over ``arena`` was freed: keep it, resident, for the next save."""
    global _kept_pid
    with _lock:
        if os.getpid() != _kept_pid:
            _kept.clear()
            _kept_pid = os.getpid()
        _kept.append(arena)
        del _kept[:-KEEP]


def _take(nbytes: int) -> AnonymousMap | None:
    """The smallest kept mapping of ``nbytes`` up to twice that, taken off the list."""
    with _lock:
        if os.getpid() != _kept_pid:
            return None
        fits = sorted((each for each in _kept if nbytes <= len(each) <= 2 * nbytes), key=len)
        if not fits:
            return None
        _kept.remove(fits[0])
        return fits[0]


def copy_storages(storages: Sequence[torch.UntypedStorage], *, keep: bool) -> list[torch.UntypedStorage]:
    """A copy of each host storage in ``storages``, each in memory of its own that nothing else
    shares. With ``keep`` the copies go into a mapping kept from an earlier save where one fits,
    and their mapping is kept for a later save once every copy over it is freed.

    Each copy is one ``memcpy`` on the calling thread (numpy's): torch's ``copy_`` splits a
    large copy over its intra-op threads, and on a loaded machine the caller then waited for a
    thread that was not running (27 ms for 13 MB, against 1 ms)."""
    lengths = [storage.nbytes() for storage in storages]
    offsets, total = aligned_offsets(lengths)
    arena = None
    if keep and total >= COPY_MIN:
        arena = _take(total)
        if arena is None:
            mapped = fresh_map(total, huge=False)
            arena = None if mapped is None else mapped[0]
    if arena is None:  # the allocator's memory, as `clone()` took (it may reuse pages it holds)
        lease = np.empty(total + ALIGN, dtype=np.uint8)
        lease = lease[-lease.ctypes.data % ALIGN :][:total]
    else:
        lease = np.frombuffer(arena, dtype=np.uint8)  # every copy holds it; it holds the arena
        weakref.finalize(lease, _give_back, arena).atexit = False
    out = []
    for storage, offset, length in zip(storages, offsets, lengths):
        if not length:
            out.append(torch.UntypedStorage(0))
            continue
        target = lease[offset : offset + length]
        np.copyto(target, torch.empty(0, dtype=torch.uint8).set_(storage).numpy(), casting="no")
        out.append(torch.frombuffer(target.data, dtype=torch.uint8).untyped_storage())
    return out


def release_copies() -> int:
    """Unmap the mappings kept for the copies of later saves; returns the bytes given back."""
    with _lock:
        freed = sum(len(each) for each in _kept)
        _kept.clear()
    return freed
