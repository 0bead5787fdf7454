"""A read-only view of a checkpoint directory (``CheckpointManager(dir, read_only=True)``):
an evaluator beside a running manager lists, loads and restores its checkpoints and waits for
new ones, without ever writing, deleting or taking the directory's lock.

Reading beside a writer is safe by the writer's order of operations: an archive is complete
before the index lists it, the index is replaced atomically, and a pruned archive is deleted
only after the index stopped listing it. A reader opens an archive once and reads it through
that file, which an unlink does not take away (POSIX); when the newest archive is already gone
at open, the index is read again and the newest listed then is taken. A load or restore thus
reads one whole checkpoint, never a mix of two.
"""

from __future__ import annotations

from typing import Any

from .. import _api as api
from ..exceptions import ArchiveNotFoundError, CheckpointDirectoryError, ZipsaveError
from ._checkpoints import CheckpointManager
from ._directory import check_folder, read_index
from ._index import INDEX_NAME, Checkpoint
from ._resume import newest_intact
from ._settings import check_keep_best, check_signing
from ._store import open_store

__all__ = ["ReadOnlyCheckpointManager"]

#: How often a read gives up on an archive pruned under it and reads the index again.
_RETRIES = 50


class _Pruned(Exception):
    """The archive the index listed was deleted before it could be opened."""


class ReadOnlyCheckpointManager(CheckpointManager):
    """What ``CheckpointManager(directory, read_only=True)`` returns: the manager's reading
    methods, each reading the directory's index afresh; ``save`` raises."""

    def __init__(
        self,
        directory: Any,
        *,
        keep_best: tuple[str, str] | tuple[str, str, int] | None = None,
        storage_options: dict[str, Any] | None = None,
        read_only: bool = True,
        trust: Any = None,
        **ignored: Any,
    ) -> None:
        del read_only, ignored  # the writer's policy (keep_last, every_steps, sign...) is the writer's
        self.sign, self.trust = check_signing(None, trust)
        self.keep_last = self.every_steps = self.every_seconds = None
        self.keep_best = check_keep_best(keep_best)
        self.background = False
        self.storage_options = storage_options
        self._store = open_store(directory, storage_options)
        self.directory = self._store.location
        self._closed = self._superseded = False
        self._lock = None
        check_folder(self._store, must_exist=False)
        self.list()  # a folder that is no manager's is refused now, not at the first load

    @property
    def read_only(self) -> bool:
        return True

    # -- what is there ---------------------------------------------------------------------------
    def list(self) -> list[Checkpoint]:
        """The complete checkpoints as the directory's index lists them now, oldest step first;
        empty while the directory or its index does not exist yet (a run about to start)."""
        if not self._store.exists():
            return []
        found = read_index(self._store)
        if found is None:
            names = self._store.names()
            if names:
                raise CheckpointDirectoryError(
                    f"`{self._store.location}` has no `{INDEX_NAME}`, so it is not a checkpoint directory of zipsave.",
                    hint="Point the view at the directory a CheckpointManager or CheckpointCallback writes to.",
                )
            return []
        return found

    def latest(self) -> Checkpoint | None:
        found = self.list()
        return found[-1] if found else None

    # -- never writes --------------------------------------------------------------------------
    def _refuse(self, what: str) -> ZipsaveError:
        return ZipsaveError(
            f"the CheckpointManager of `{self.directory}` was opened with read_only=True, so it cannot {what}.",
            hint="Save from the manager that runs the training (one per directory).",
        )

    def due(self, step: int) -> bool:
        raise self._refuse("save")

    def save(self, step: int, obj: Any, **options: Any) -> Any:
        raise self._refuse("save")

    def release(self) -> None:
        """Nothing to release: a read-only view never takes the lock."""

    def acquire(self) -> None:
        raise self._refuse("take the directory's lock")

    def wait(self) -> None:
        """Nothing to wait for: a read-only view never saves."""

    def close(self) -> None:
        self._closed = True

    # -- reading ---------------------------------------------------------------------------------
    def _resume(self, attempt: Any) -> tuple[Checkpoint | None, Any]:
        def whole(checkpoint: Checkpoint) -> Any:
            try:
                return attempt(checkpoint)
            except ArchiveNotFoundError as err:
                raise _Pruned() from err

        for _ in range(_RETRIES):
            try:
                # damage is warned about and skipped as by the manager, but never renamed here
                found, result, _ = newest_intact(
                    self.list(), whole, store=self._store, location=self.directory, set_aside=False
                )
            except _Pruned:
                continue  # the writer went on meanwhile: its index lists newer checkpoints
            return found, result
        raise CheckpointDirectoryError(
            f"checkpoint directory `{self.directory}`: the newest checkpoint was deleted before it could be "
            f"read, {_RETRIES} times in a row.",
            hint="The writer prunes faster than this reader opens archives: keep more (`keep_last`).",
        )

    def restore_best(
        self, obj: Any, metric: str | None = None, mode: str | None = None, **restore_options: Any
    ) -> Checkpoint | None:
        return self._read_best(metric, mode, restore_options, lambda c: api.restore(obj, c.path, **restore_options))[0]

    def load_best(self, metric: str | None = None, mode: str | None = None, **load_options: Any) -> Any:
        return self._read_best(metric, mode, load_options, lambda c: api.load(c.path, **load_options))[1]

    def _read_best(
        self, metric: str | None, mode: str | None, options: dict[str, Any], attempt: Any
    ) -> tuple[Checkpoint | None, Any]:
        for _ in range(_RETRIES):
            checkpoint = self._best_for_loading(metric, mode, options)
            if checkpoint is None:
                return None, None
            try:
                return checkpoint, attempt(checkpoint)
            except ArchiveNotFoundError:
                continue  # a better one came and this one was pruned: read the index again
        raise CheckpointDirectoryError(
            f"checkpoint directory `{self.directory}`: the best checkpoint was deleted before it could be read, "
            f"{_RETRIES} times in a row."
        )


CheckpointManager.read_only_class = ReadOnlyCheckpointManager
