"""Checkpoints of a training run in one directory: ``CheckpointManager`` and its index."""

from ._checkpoints import CheckpointManager
from ._directory import list_checkpoints, missing_archives
from ._display import table
from ._index import Checkpoint

__all__ = ["Checkpoint", "CheckpointManager", "list_checkpoints", "missing_archives", "table"]
