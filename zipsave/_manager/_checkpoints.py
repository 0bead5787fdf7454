"""``CheckpointManager``: periodic checkpoints of a training run in one directory (local or
fsspec URL), keeping the newest and the best, crash-safe, with resume from the newest.

Crash safety comes from the order of writes. A checkpoint's archive is written atomically
and durably by ``zipsave.save``; only then is the index (``zipsave-checkpoints.json``, itself
replaced atomically) rewritten to list it; only after that are the checkpoints the policy no
longer keeps deleted. A process killed at any point leaves an index that lists complete
archives only; files it does not list are leftovers of the interrupted step and are removed
when the directory is opened again.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from .. import _api as api
from .._calls import keyword_options
from .._printable import visible
from ..exceptions import CheckpointDirectoryError, ZipsaveError
from ._directory import open_directory
from ._index import INDEX_NAME, Checkpoint, checkpoint_name, encode_index, plain_metrics, to_keep, warn_best_metric
from ._lock import DirectoryLock
from ._reading import CheckpointReading
from ._resume import newest_intact
from ._settings import as_step, check_count, check_keep_best, check_signing
from ._store import LocalStore, open_store
from ._waiting import register, take_over

__all__ = ["CheckpointManager"]

_log = logging.getLogger("zipsave")


class CheckpointManager(CheckpointReading):
    """Save a training run every few steps or seconds into one directory, keep the newest
    and the best checkpoints, and resume from the newest after a crash.

    Parameters
    ----------
    directory
        A local folder (created if missing) or an fsspec URL (``s3://bucket/run-7``). It must
        be empty, new, or a directory a manager created.
    keep_last
        Keep this many newest checkpoints and delete older ones (the ``keep_best`` ones
        stay). ``None`` (the default) keeps every checkpoint.
    keep_best
        ``(metric, "max")`` or ``(metric, "min")`` (optionally a third item, how many): also
        keep the best checkpoint(s) by that entry of ``metrics``.
    every_steps
        ``save`` writes a checkpoint when ``step`` reaches the next multiple of this.
    every_seconds
        ``save`` writes a checkpoint when this many seconds passed since the last one (or
        since the manager was opened). With neither, every call to ``save`` writes.
    background
        Write archives on a worker thread (:func:`zipsave.save` with ``background=True``):
        ``save`` returns once the state is copied, and the index is updated when the archive
        is durable. Errors surface at the next ``save``, ``wait`` or ``close``. An SB3 replay
        buffer is copied incrementally (:func:`zipsave.save`'s ``incremental``; ``save(...,
        incremental=False)`` or :func:`zipsave.release_snapshots` give its shadow back).
    storage_options
        Options for the fsspec filesystem of a URL ``directory``.
    break_lock
        Take over the lock of another manager that cannot be checked to be gone (a lock file
        on an object store left by a process on another host). Locks of processes that died
        on this host are always taken over.
    read_only
        Open a read-only view instead, for an evaluator beside the process that trains: the
        reading methods and :meth:`wait_for_new`, reading the index afresh each time; it
        never writes, deletes or locks, and ``save`` raises. The writer's options are ignored
        (``keep_best`` still names the default metric of :meth:`best`).
    sign, trust
        Sign each checkpoint written (:class:`~zipsave.Signer`), check each one read (:class:`~zipsave.Trust`).

    Raises
    ------
    CheckpointDirectoryError
        ``directory`` holds files but no checkpoint index: it is not a manager's.
    CheckpointLockedError
        A manager of another process has the directory open. (A newer manager of the same
        process takes the directory over from an older one, which then refuses to save.)

    Examples
    --------
    >>> manager = zipsave.CheckpointManager("checkpoints", keep_last=3, every_steps=1000)  # doctest: +SKIP
    >>> for step in range(start, 100_000):  # doctest: +SKIP
    ...     train_step()
    ...     manager.save(step, app_state, metrics={"loss": loss})  # a no-op unless due
    """

    #: The class of ``read_only=True``; ``_view`` sets it (it subclasses this one).
    read_only_class: type | None = None

    def __new__(cls, directory: Any = None, *args: Any, read_only: bool = False, **kwargs: Any) -> CheckpointManager:
        if read_only and cls is CheckpointManager and cls.read_only_class is not None:
            return super().__new__(cls.read_only_class)
        return super().__new__(cls)

    @keyword_options("CheckpointManager")
    def __init__(
        self,
        directory: Any,
        *,
        keep_last: int | None = None,
        keep_best: tuple[str, str] | tuple[str, str, int] | None = None,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        background: bool = True,
        storage_options: dict[str, Any] | None = None,
        break_lock: bool = False,
        read_only: bool = False,
        sign: Any = None,
        trust: Any = None,
    ) -> None:
        self.sign, self.trust = check_signing(sign, trust)  # see docs/signing.rst
        check_count("keep_last", keep_last)
        check_count("every_steps", every_steps)
        if every_seconds is not None and not (isinstance(every_seconds, (int, float)) and every_seconds > 0):
            raise ValueError(f"`every_seconds` must be a positive number or None, got {every_seconds!r}.")
        self.keep_last = keep_last
        self.keep_best = check_keep_best(keep_best)
        self.every_steps, self.every_seconds = every_steps, every_seconds
        self.background = background
        self.storage_options = storage_options
        self._store = open_store(directory, storage_options)
        self.directory = self._store.location
        self._mutex = threading.Condition()
        self._queue: collections.deque[tuple[Any, int, float, dict[str, Any]]] = collections.deque()
        self._worker: threading.Thread | None = None
        self._errors: list[BaseException] = []
        self._closed = False
        self._best_warned = False
        self._lock: DirectoryLock | None = None
        self._superseded = False
        take_over(self)  # an older manager of this process on this directory lets it go
        self._lock, self._checkpoints = open_directory(self._store, break_lock=break_lock)
        self._last_step = self._checkpoints[-1].step if self._checkpoints else None
        self._last_time = time.monotonic()
        register(self)

    @property
    def read_only(self) -> bool:
        """Whether this is a read-only view (``read_only=True``), which never saves."""
        return False

    # -- what is there -------------------------------------------------------------------------
    def list(self) -> list[Checkpoint]:
        """The complete checkpoints, oldest step first (a background save shows up once its
        archive is durable)."""
        with self._mutex:
            return list(self._checkpoints)

    def latest(self) -> Checkpoint | None:
        """The checkpoint with the highest step, or ``None`` when there is none."""
        with self._mutex:
            return self._checkpoints[-1] if self._checkpoints else None

    # -- saving --------------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        """Whether ``save(step, ...)`` would write a checkpoint now.

        Raises
        ------
        CheckpointDirectoryError
            ``step`` is lower than a checkpoint the directory already holds (a new run in an
            old directory, or a resume that did not restore the newest checkpoint).
        """
        step = as_step(step)
        last = self._last_step
        if last is not None and step < last:
            raise CheckpointDirectoryError(
                f"checkpoint directory `{self.directory}` already holds step {last}, later than step {step}.",
                hint="Resume with `manager.restore_latest(...)` and continue from its step, or use a new directory.",
            )
        if last is not None and step == last:
            return False
        if self.every_steps is None and self.every_seconds is None:
            return True
        if self.every_steps is not None and step // self.every_steps > (last or 0) // self.every_steps:
            return True
        return self.every_seconds is not None and time.monotonic() - self._last_time >= self.every_seconds

    @keyword_options("CheckpointManager.save", order=("metrics",))
    def save(
        self,
        step: int,
        obj: Any,
        *,
        metrics: Mapping[str, Any] | None = None,
        force: bool = False,
        background: bool | None = None,
        **save_options: Any,
    ) -> Any:
        """Write a checkpoint of ``obj`` at ``step`` when one is due; otherwise do nothing.

        Call it every step: it is cheap when nothing is due.

        Parameters
        ----------
        step
            The training step (an integer that grows).
        obj
            What :func:`zipsave.save` takes: an app-state dict (with a :class:`zipsave.RNGState`
            for an exact resume), a :class:`~zipsave.Saveable`, an SB3 model.
        metrics
            Numbers (or strings) recorded in the index, e.g. ``{"reward": 231.5}``; the
            ``keep_best`` metric is taken from here.
        force
            Write even when not due (e.g. at the end of training); a step already saved is
            not written again.
        background
            This save only: on a worker thread (``True``) or before returning (``False``, e.g.
            for the last checkpoint); ``None`` (the default) follows the manager's setting.
        **save_options
            Passed to :func:`zipsave.save` (``exclude=``, ``include=``, ``sha256=``...).

        Returns
        -------
        None when nothing was due; else the new :class:`Checkpoint` (blocking), or the
        :class:`~zipsave.SaveHandle` of the background save.

        Raises
        ------
        Exception
            What an earlier background save raised, once; or what this save raised.
        """
        self._check_open()
        self._raise_errors()
        step = as_step(step)
        if not self.due(step) and not (force and step != self._last_step):
            return None
        if self._lock is None:
            self.acquire()  # let go by release(): take the directory again, and its index afresh
            if not self.due(step) and not (force and step != self._last_step):
                return None
        recorded = plain_metrics(metrics)
        self._check_best_metric(step, recorded)
        when = time.time()
        target = self._store.target(checkpoint_name(step))
        options = {"sign": self.sign, **save_options} if self.sign is not None else dict(save_options)
        if self.storage_options is not None:
            options["storage_options"] = self.storage_options
        if self.background if background is None else background:
            handle = api.save(obj, target, background=True, **{"incremental": True, **options})
            self._saved(step)
            with self._mutex:
                self._queue.append((handle, step, when, recorded))
                if self._worker is None:
                    self._worker = threading.Thread(target=self._work, name=f"zipsave-checkpoints {self.directory}")
                    self._worker.start()
            return handle
        self.wait()
        api.save(obj, target, **options)
        self._saved(step)
        return self._commit(step, when, recorded)

    def _check_best_metric(self, step: int, recorded: dict[str, Any]) -> None:
        if self.keep_best is not None and not self._best_warned:  # once: a misspelt name would repeat
            self._best_warned = warn_best_metric(self.directory, self.keep_best, step, recorded, self.list())

    def _saved(self, step: int) -> None:
        self._last_step = step
        self._last_time = time.monotonic()

    def _work(self) -> None:
        """Commit background saves in call order as their archives become durable."""
        while True:
            with self._mutex:
                if not self._queue:
                    self._worker = None
                    self._mutex.notify_all()
                    return
                handle, step, when, recorded = self._queue[0]
            error = handle.exception()
            if error is None:
                try:
                    self._commit(step, when, recorded)
                except BaseException as err:  # noqa: BLE001 - surfaced by wait()/save()
                    error = err
            with self._mutex:
                self._queue.popleft()
                if error is not None:
                    self._errors.append(error)

    def _commit(self, step: int, when: float, recorded: dict[str, Any]) -> Checkpoint:
        """The archive is durable: list it in the index, then delete what the policy drops."""
        name = checkpoint_name(step)
        entry = Checkpoint(step, when, recorded, self._store.size(name), self._store.target(name))
        with self._mutex:
            entries = [c for c in self._checkpoints if c.step != step] + [entry]
        kept = to_keep(entries, keep_last=self.keep_last, keep_best=self.keep_best)
        self._store.write(INDEX_NAME, encode_index(kept))
        with self._mutex:
            self._checkpoints = kept
        kept_steps = {c.step for c in kept}
        for old in entries:
            if old.step not in kept_steps:
                self._store.delete(old.name)
        if isinstance(self._store, LocalStore):
            self._store.sync()
        return entry

    def wait(self) -> None:
        """Block until every background save is written and listed; raise the first error of
        one that failed (once)."""
        with self._mutex:
            while self._queue or self._worker is not None:
                self._mutex.wait()
        self._raise_errors()

    def _raise_errors(self) -> None:
        with self._mutex:
            if not self._errors:
                return
            error, self._errors = self._errors[0], []
        raise error

    def _check_open(self) -> None:
        if self._superseded:
            raise ZipsaveError(
                f"the CheckpointManager of `{self.directory}` was replaced by a newer CheckpointManager of the "
                "same directory in this process (a notebook cell run again?), which took the directory over; "
                "this one saves no more.",
                hint="Save through the newer manager.",
            )
        if self._closed:
            raise ZipsaveError(f"the CheckpointManager of `{self.directory}` is closed.")

    def release(self) -> None:
        """Wait for background saves and let the directory go, until the next :meth:`save`
        (or :meth:`acquire`) takes it again; meanwhile another manager may open it. The
        listing, loads and restores keep working. :class:`zipsave.sb3.CheckpointCallback`
        calls it when ``learn`` returns."""
        self.wait()
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()

    def acquire(self) -> None:
        """Take the directory again after :meth:`release` (a no-op while held); the index is
        read again, since another manager may have saved meanwhile.

        Raises
        ------
        CheckpointLockedError
            Another manager has the directory open now (one of this process too: it is newer).
        """
        self._check_open()
        if self._lock is not None:
            return
        # no take-over here: a manager made after this one let go is the newer one, and keeps it
        self._lock, found = open_directory(self._store)
        with self._mutex:
            self._checkpoints = found
        newest = found[-1].step if found else None
        if newest is not None and (self._last_step is None or newest > self._last_step):
            self._last_step = newest
        register(self)

    def close(self) -> None:
        """Wait for background saves, then release the directory's lock. Idempotent."""
        if self._closed:
            return
        try:
            self.wait()
        finally:
            self._closed = True
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def _supersede(self) -> None:
        """A newer manager of this process opens the directory: finish what is pending, let
        the lock go, and refuse to save from now on."""
        try:
            self.wait()
        except Exception as err:  # noqa: BLE001 - the newer manager must not fail for the older one's save
            _log.warning(
                "zipsave: a pending save of the replaced CheckpointManager of `%s` failed: %s",
                visible(self.directory),
                visible(err),
            )
        self._superseded = True
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except Exception:  # noqa: BLE001 - the exception already propagating matters more
            _log.exception("zipsave: closing the CheckpointManager of `%s` failed", visible(self.directory))

    # -- resuming ------------------------------------------------------------------------------
    def _resume(self, attempt: Any) -> tuple[Checkpoint | None, Any]:
        self.wait()
        open_ = self._lock is not None  # without the lock (closed, released) it reads and changes nothing
        found, result, damaged = newest_intact(
            self.list(), attempt, store=self._store, location=self.directory, set_aside=open_
        )
        if damaged and open_:  # the run goes on from `found`: its later steps must be free to save again
            gone = {c.step for c in damaged}
            with self._mutex:
                kept = [c for c in self._checkpoints if c.step not in gone]
                self._store.write(INDEX_NAME, encode_index(kept))
                self._checkpoints = kept
            self._last_step = found.step if found is not None else None
        return found, result
