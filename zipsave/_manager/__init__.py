"""Checkpoints of a training run in one directory: ``CheckpointManager`` and its index."""

from ._checkpoints import CheckpointManager
from ._directory import is_manager_directory, list_checkpoints, missing_archives, set_aside_archives, verify_directory
from ._display import table
from ._index import Checkpoint
from ._view import ReadOnlyCheckpointManager  # registers itself as CheckpointManager(read_only=True)

__all__ = [
    "Checkpoint",
    "CheckpointManager",
    "ReadOnlyCheckpointManager",
    "is_manager_directory",
    "list_checkpoints",
    "missing_archives",
    "set_aside_archives",
    "table",
    "verify_directory",
]
