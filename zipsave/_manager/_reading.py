"""What a checkpoint manager and a read-only view of its directory share: listing the
checkpoints, loading and restoring the newest or the best, and waiting for a new one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import _api as api
from . import _display
from ._index import Checkpoint, best_of
from ._resume import require_metric
from ._waiting import new_checkpoints, wait_for_new

__all__ = ["CheckpointReading"]


class CheckpointReading:
    """The reading half of :class:`CheckpointManager` (its subclasses provide ``list``'s source,
    ``wait`` and ``_resume``)."""

    keep_best: Any
    directory: str
    storage_options: dict[str, Any] | None
    trust: Any  # a zipsave.Trust every load and restore checks first, or None

    def wait(self) -> None:
        raise NotImplementedError

    def _resume(self, attempt: Any) -> tuple[Checkpoint | None, Any]:
        raise NotImplementedError

    # -- what is there -------------------------------------------------------------------------
    def list(self) -> list[Checkpoint]:  # noqa: A003 - the manager's documented name
        raise NotImplementedError

    def latest(self) -> Checkpoint | None:
        raise NotImplementedError

    def best(self, metric: str | None = None, mode: str | None = None) -> Checkpoint | None:
        """The best checkpoint by ``metric`` (default: the ``keep_best`` metric and mode), or
        ``None`` when no checkpoint has that metric."""
        if metric is None:
            if self.keep_best is None:
                raise ValueError('name a metric: `best("reward", "max")`, or open the manager with `keep_best=`.')
            metric, default_mode, _ = self.keep_best
            mode = mode or default_mode
        mode = mode or "max"
        if mode not in ("max", "min"):
            raise ValueError(f'`mode` must be "max" or "min", got {mode!r}.')
        found = best_of(self.list(), metric, mode)
        return found[0] if found else None

    def __len__(self) -> int:
        return len(self.list())

    def __repr__(self) -> str:
        return _display.text(self)

    def _repr_html_(self) -> str:
        return _display.html(self)

    # -- resuming ------------------------------------------------------------------------------
    def restore_latest(self, obj: Any, **restore_options: Any) -> Checkpoint | None:
        """Restore the newest intact checkpoint into ``obj`` in place (:func:`zipsave.restore`;
        ``strict=True`` unless you pass ``strict=False``, as a resume must not go on from one
        restored only in part; other options pass through).

        A newest checkpoint whose archive is damaged or gone is skipped with a
        :class:`~zipsave.ZipsaveWarning` naming it and the cause, and moved aside
        (``step-<step>.zip.broken``); ``obj`` is then restored from the one before it, in full.
        When no checkpoint can be restored, the newest one's error is raised.

        Returns
        -------
        The :class:`Checkpoint` restored, or ``None`` when there is none yet (start fresh).

        Examples
        --------
        >>> checkpoint = manager.restore_latest(app_state)  # doctest: +SKIP
        >>> start = checkpoint.step + 1 if checkpoint else 0  # doctest: +SKIP
        """
        self._load_defaults(restore_options)
        return self._resume(lambda checkpoint: api.restore(obj, checkpoint.path, **restore_options))[0]

    def wait_for_new(
        self, after_step: int | None = None, *, timeout: float | None = None, poll: float = 1.0
    ) -> Checkpoint | None:
        """Wait until the directory lists a checkpoint newer than ``after_step`` (any, with
        ``None``) and return the newest one; return ``None`` when ``timeout`` seconds pass
        first (``None``: wait for ever). An evaluator's loop, beside a running training, on a
        read-only view; see :meth:`new_checkpoints`.

        Examples
        --------
        >>> view = zipsave.CheckpointManager("checkpoints", read_only=True)  # doctest: +SKIP
        >>> checkpoint = view.wait_for_new(after_step=1000, timeout=600)  # doctest: +SKIP
        """
        return wait_for_new(self, after_step, timeout=timeout, poll=poll)

    def new_checkpoints(
        self, after_step: int | None = None, *, timeout: float | None = None, poll: float = 1.0
    ) -> Iterator[Checkpoint]:
        """Yield the newest checkpoint each time a newer one is listed (checkpoints saved
        while the loop body ran are passed over for the newest), and stop once ``timeout``
        seconds pass without a new one (TensorFlow's ``checkpoints_iterator``)."""
        return new_checkpoints(self, after_step, timeout=timeout, poll=poll)

    def load_latest(self, **load_options: Any) -> Any:
        """Load the newest intact checkpoint (:func:`zipsave.load`; ``cls=``, ``env=``... pass
        through; ``strict=True`` unless you pass ``strict=False``), or return ``None`` when
        there is none yet. A damaged newest checkpoint is skipped as by :meth:`restore_latest`."""
        self._load_defaults(load_options)
        return self._resume(lambda checkpoint: api.load(checkpoint.path, **load_options))[1]

    def restore_best(
        self, obj: Any, metric: str | None = None, mode: str | None = None, **restore_options: Any
    ) -> Checkpoint | None:
        """Restore the best checkpoint by ``metric`` (:meth:`best`) into ``obj`` in place, as
        :meth:`restore_latest` does the newest, and return it; ``None`` when there is none yet.
        A damaged best checkpoint is an error, never replaced by the next best (another model);
        a ``metric`` no checkpoint has is a ``ValueError`` naming the ones they have."""
        checkpoint = self._best_for_loading(metric, mode, restore_options)
        if checkpoint is not None:
            api.restore(obj, checkpoint.path, **restore_options)
        return checkpoint

    def load_best(self, metric: str | None = None, mode: str | None = None, **load_options: Any) -> Any:
        """Load the best checkpoint by ``metric`` (:func:`zipsave.load`, as :meth:`load_latest`
        does the newest), or return ``None`` when there is none yet; errors as :meth:`restore_best`."""
        checkpoint = self._best_for_loading(metric, mode, load_options)
        return api.load(checkpoint.path, **load_options) if checkpoint is not None else None

    def _best_for_loading(self, metric: str | None, mode: str | None, options: dict[str, Any]) -> Checkpoint | None:
        self.wait()
        self._load_defaults(options)
        found = self.best(metric, mode)
        if found is None:
            require_metric(self.list(), metric or (self.keep_best[0] if self.keep_best else None), self.directory)
        return found

    def _load_defaults(self, options: dict[str, Any]) -> None:
        if self.storage_options is not None:
            options.setdefault("storage_options", self.storage_options)
        options.setdefault("strict", True)
        if self.trust is not None:
            options.setdefault("trust", self.trust)
