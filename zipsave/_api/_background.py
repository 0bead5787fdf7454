"""Background saves: ``zipsave.save(obj, path, background=True)``.

The calling thread collects and encodes the object as for a plain save, then copies every
tensor storage and array (one ``memcpy`` each, on the tensor's own device), so the archive
shows the state at the moment of the call however training changes the model afterwards.
Host storages are copied side by side into one mapping (``_tensors/_copies.py``); with
``incremental=True`` it is the mapping the last save kept once it had written, whose pages are
in place already (faulting in fresh pages cost more than the copy).
A component that offers it (an SB3 replay buffer) is copied into a shadow (``_shadow.py``):
with ``incremental=True`` one kept between saves, into which a later save copies only the rows
written since the last one (a save that arrives while an earlier one still writes from that
shadow waits for it); without it, a shadow of that save's own, given back once it has written.
A large copy into a shadow (a first one, or any without ``incremental``) is finished by the
writer thread before it writes, while a write barrier keeps the rows training writes meanwhile
out of it: the call does not wait for the copy of the buffer, whatever its size.
One of ``MAX_IN_FLIGHT`` writer threads, started once and kept, writes the archive; saves to
the same destination run one after another in call order, and the interpreter waits for
pending saves before it exits.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import concurrent.futures.thread  # noqa: F401 - registers its exit hook before ours (below)
import copy
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .. import _api, _tensors  # the snapshot's copies and shadows, imported by the first background save
from .._archive import describe, destination_key

__all__ = ["SaveHandle", "start_background_save", "wait_for_pending"]

_log = logging.getLogger("zipsave")

#: At most this many snapshots exist at once; a further background save waits for a slot,
#: so saving faster than the disk can write does not pile up copies of the model.
MAX_IN_FLIGHT = 4

_lock = threading.Lock()
_latest: dict[Any, SaveHandle] = {}  # destination -> the most recent save to it
_slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)
_THREAD_PREFIX = "zipsave-save"
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_pid = 0


class SaveHandle:
    """A save running in the background, as returned by ``zipsave.save(..., background=True)``.

    Attributes
    ----------
    path
        The destination passed to ``save``.

    Examples
    --------
    >>> handle = zipsave.save(model, "ckpt.zip", background=True)  # doctest: +SKIP
    >>> train_more(model)  # the archive still holds the state at the call  # doctest: +SKIP
    >>> handle.wait()  # raises whatever the save raised  # doctest: +SKIP
    """

    def __init__(self, path: Any, previous: SaveHandle | None) -> None:
        self.path = path
        self._previous = previous
        self._finished = threading.Event()
        self._error: BaseException | None = None
        self._retrieved = False

    def __repr__(self) -> str:
        if not self.done():
            state = "running"
        elif self._error is not None:
            state = f"failed: {type(self._error).__name__}"
        else:
            state = "done"
        return f"<SaveHandle {describe(self.path)!r} {state}>"

    def done(self) -> bool:
        """``True`` once the save has finished, successfully or not."""
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> None:
        """Block until the archive is written.

        Parameters
        ----------
        timeout
            Seconds to wait at most; ``None`` waits as long as it takes.

        Raises
        ------
        TimeoutError
            The save is still running after ``timeout`` seconds.
        Exception
            Whatever the save raised (e.g. :class:`~zipsave.ZipsaveError`, ``OSError``).
        """
        error = self.exception(timeout)
        if error is not None:
            raise error

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait as :meth:`wait` does, then return the save's exception instead of raising
        it (``None`` when it succeeded)."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"the background save to `{describe(self.path)}` is still running after {timeout} s.")
        self._retrieved = True
        return self._error

    def __del__(self) -> None:
        if self._error is not None and not self._retrieved:
            _log.error("background save to `%s` failed and nobody called wait(): %r", describe(self.path), self._error)


def wait_for_pending(path: Any) -> None:
    """Block until background saves to ``path`` have finished (a plain save calls this, so
    the last call wins)."""
    with _lock:
        handle = _latest.get(destination_key(path))
    if handle is not None:
        handle._finished.wait()


def start_background_save(
    enc: Any, path: Any, save: Callable[[Any, Any], None], *, incremental: bool = False
) -> SaveHandle:
    """Snapshot the encoded object ``enc`` now and run ``save(snapshot, path)`` on a thread.
    With ``incremental``, components that offer a shadow (``Encoded.snapshot``) use it."""
    key = destination_key(path)
    _slots.acquire()
    held: list[Callable[[], None]] = []  # shadows this save's writer holds until it has written
    fills: list[Callable[[], None]] = []  # what completes them, run by the writer first
    try:
        memo: dict = {}
        _copy_host_storages(enc, memo, keep=incremental)
        snapshot = _snapshot(enc, memo, held, fills, keep=incremental)
    except BaseException:
        _let_go(held)
        _slots.release()
        raise
    with _lock:
        handle = SaveHandle(path, _latest.get(key))
        _latest[key] = handle
    try:
        _writers().submit(_run, handle, key, [snapshot], save, held, fills)
    except BaseException:
        _finish(handle, key, held)
        raise
    return handle


def _writers() -> concurrent.futures.ThreadPoolExecutor:
    """The writer threads: one per save in flight at most, started once and kept (handing a
    save to a waiting thread costs the caller nothing; starting a thread made it wait for the
    new thread to run)."""
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():  # a forked child has none of its threads
            _pool = concurrent.futures.ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix=_THREAD_PREFIX)
            _pool_pid = os.getpid()
        return _pool


def _run(
    handle: SaveHandle,
    key: Any,
    box: list[Any],
    save: Callable[[Any, Any], None],
    held: list[Callable[[], None]],
    fills: list[Callable[[], None]],
) -> None:
    threading.current_thread().name = f"{_THREAD_PREFIX} {describe(handle.path)}"
    try:
        for fill in fills:  # at once, not after earlier saves: training writes through a barrier meanwhile
            fill()
        previous = handle._previous
        if previous is not None:
            previous._finished.wait()
        save(box[0], handle.path)
    except BaseException as err:  # noqa: BLE001 - surfaced by SaveHandle.wait()
        handle._error = err
    finally:
        box.clear()  # the copies are freed (kept memory goes back) before the save is done
        _finish(handle, key, held)
        threading.current_thread().name = _THREAD_PREFIX


def _let_go(held: list[Callable[[], None]]) -> None:
    while held:
        held.pop()()


def _finish(handle: SaveHandle, key: Any, held: list[Callable[[], None]]) -> None:
    handle._previous = None  # let the chain of finished handles be freed
    _let_go(held)  # before `done()`: a save after `wait()` finds the shadow free
    with _lock:
        if _latest.get(key) is handle:
            del _latest[key]
    _slots.release()
    handle._finished.set()


def _wait_at_exit() -> None:
    with _lock:
        pending = list(_latest.values())
    for handle in pending:
        handle._finished.wait()
        if handle._error is not None and not handle._retrieved:
            handle._retrieved = True
            _log.error("background save to `%s` failed: %r", describe(handle.path), handle._error)
    with _lock:
        pool = _pool if _pool_pid == os.getpid() else None
    if pool is not None:
        pool.shutdown(wait=True)  # let workers end before the interpreter tears torch down


# Pending saves must finish while thread pools still take work (the writer hashes on one):
# threading's exit hooks run in reverse order of registration, before concurrent.futures
# stops its pools (registered when it was imported, above), and before `atexit`. CPython
# 3.12+ starts no new thread by then: a save whose helper pool was not made yet gets one that
# runs its tasks on the saving thread (`_archive._crc_pool.pool`).
try:
    threading._register_atexit(_wait_at_exit)  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - CPython < 3.9 or another implementation
    atexit.register(_wait_at_exit)


# -- the snapshot ------------------------------------------------------------------------------
def _snapshot(
    enc: Any, memo: dict, held: list[Callable[[], None]], fills: list[Callable[[], None]], *, keep: bool
) -> Any:
    """A copy of an encoded object whose tensors and arrays no longer share memory with the
    live model. Everything else in it (rendered JSON bytes) is immutable already. ``held``
    collects the release of each shadow used for the arrays, ``fills`` what the writer must run
    to complete them; ``keep``: the shadows stay for the next save (``incremental=True``)."""
    taken = None
    if enc.snapshot is not None and enc.arrays:
        taken = _api._shadow.take(enc.snapshot, enc.arrays, held, keep=keep)
        if taken is not None:
            held.append(taken[1])
            if taken[2] is not None:
                fills.append(taken[2])
    arrays = [(name, _tensors.fresh_copy(arr)) for name, arr in enc.arrays] if taken is None else taken[0]
    return enc.replace(
        state=[(name, _copy_tree(sd, memo)) for name, sd in enc.state],
        variables=None if enc.variables is None else _copy_tree(enc.variables, memo),
        arrays=arrays,
        components=[_snapshot(comp, memo, held, fills, keep=keep) for comp in enc.components],
        snapshot=None,  # the live model is not needed by the writer
    )


def _copy_tree(value: Any, memo: dict) -> Any:
    """Copy a state-dict tree. Shared objects stay shared, and tensors that share a storage
    keep sharing one copied storage, so the archive's bytes equal a plain save's."""
    if isinstance(value, torch.Tensor):
        key = ("tensor", id(value))
        if key not in memo:
            memo[key] = _copy_tensor(value, memo)
        return memo[key]
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, (dict, list, tuple)):
        key = ("container", id(value))
        if key in memo:
            return memo[key]
        if isinstance(value, dict):
            out: Any = copy.copy(value)  # same type and instance attributes (e.g. `_metadata`)
            memo[key] = out
            for k, v in value.items():
                out[k] = _copy_tree(v, memo)
            if hasattr(value, "__dict__"):
                out.__dict__.update(copy.deepcopy(value.__dict__))
        elif isinstance(value, list):
            out = []
            memo[key] = out
            out.extend(_copy_tree(v, memo) for v in value)
        else:
            items = [_copy_tree(v, memo) for v in value]
            out = type(value)(*items) if hasattr(type(value), "_fields") else type(value)(items)
            memo[key] = out
        return out
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - an uncopyable leaf is written as it is at write time
        return value


def _plain(t: torch.Tensor) -> bool:
    """A tensor that is its storage seen through a size, stride and offset (copied as such)."""
    return (
        type(t) in (torch.Tensor, torch.nn.Parameter)
        and t.layout == torch.strided
        and not t.is_quantized
        and not t.is_conj()
        and not t.is_neg()
        and t.device.type != "meta"
        and not vars(t)
    )


def _copy_host_storages(enc: Any, memo: dict, *, keep: bool) -> None:
    """Copy the host storages of the plain tensors of ``enc`` (and its components) side by side
    into ``memo``, where ``_copy_tensor`` finds them: in memory kept resident between saves with
    ``keep`` (``_tensors.copy_storages``), so that the copy is not page faults."""
    found: dict[int, torch.UntypedStorage] = {}
    seen: set[int] = set()

    def walk(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            if value.device.type == "cpu" and _plain(value):
                storage = value.untyped_storage()
                found.setdefault(storage._cdata, storage)
        elif isinstance(value, (dict, list, tuple)) and id(value) not in seen:
            seen.add(id(value))
            for item in value.values() if isinstance(value, dict) else value:
                walk(item)

    def each(node: Any) -> None:
        for _, sd in node.state:
            walk(sd)
        walk(node.variables)
        for comp in node.components:
            each(comp)

    each(enc)
    if found:
        copies = _tensors.copy_storages(list(found.values()), keep=keep)
        memo.update((("storage", cdata), copy) for cdata, copy in zip(found, copies))


def _copy_tensor(t: torch.Tensor, memo: dict) -> torch.Tensor:
    if not _plain(t):
        return t.detach().clone()
    storage = t.untyped_storage()
    key = ("storage", storage._cdata)
    copied = memo.get(key)
    if copied is None:
        copied = storage.clone()
        memo[key] = copied
    out = torch.empty(0, dtype=t.dtype, device=t.device).set_(copied, t.storage_offset(), t.size(), t.stride())
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(out, requires_grad=t.requires_grad)
    if t.requires_grad:
        out.requires_grad_(True)
    return out
