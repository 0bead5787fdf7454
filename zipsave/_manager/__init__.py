"""Checkpoints of a training run in one directory: ``CheckpointManager`` and its index."""

from ._checkpoints import CheckpointManager
from ._directory import list_checkpoints
from ._display import table
from ._index import Checkpoint

__all__ = ["Checkpoint", "CheckpointManager", "list_checkpoints", "table"]
