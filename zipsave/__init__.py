"""zipsave: save reinforcement-learning models to one readable zip archive, and load them
back without running pickled code."""

from ._archive import Limits
from ._background import SaveHandle
from ._inspect import ArchiveInfo, inspect, read
from ._manager import Checkpoint, CheckpointManager
from ._persist import (
    LoadReport,
    SkippedEntry,
    SkippedEntryWarning,
    load,
    load_archive,
    restore,
    save,
    save_archive,
)
from ._rng import RNGState
from ._version import __version__
from .exceptions import (
    ArchiveFormatError,
    ArchiveLimitError,
    CheckpointDirectoryError,
    CheckpointLockedError,
    DecodeError,
    EncodeError,
    IntegrityError,
    MissingDependencyError,
    ParameterMismatchError,
    UnsafeGlobalError,
    ZipsaveError,
    ZipsaveWarning,
)
from .saveable import Saveable

__all__ = [
    "ArchiveFormatError",
    "ArchiveInfo",
    "ArchiveLimitError",
    "Checkpoint",
    "CheckpointDirectoryError",
    "CheckpointLockedError",
    "CheckpointManager",
    "DecodeError",
    "EncodeError",
    "IntegrityError",
    "MissingDependencyError",
    "Limits",
    "LoadReport",
    "ParameterMismatchError",
    "RNGState",
    "SaveHandle",
    "Saveable",
    "SkippedEntry",
    "SkippedEntryWarning",
    "UnsafeGlobalError",
    "ZipsaveError",
    "ZipsaveWarning",
    "__version__",
    "inspect",
    "load",
    "load_archive",
    "read",
    "restore",
    "save",
    "save_archive",
]
