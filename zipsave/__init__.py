"""zipsave: save reinforcement-learning models to one readable zip archive, and load them
back without running pickled code."""

from ._api import EnvState, RNGState, SaveHandle, Saveable, load, load_archive, restore, save, save_archive
from ._archive import Limits
from ._core import LoadReport
from ._manager import Checkpoint, CheckpointManager
from ._tools import ArchiveInfo, ArchiveMember, ComponentInfo, DataEntry, TensorInfo, inspect, read
from ._version import __version__
from .exceptions import (
    ArchiveFormatError,
    ArchiveLimitError,
    ArchiveNotFoundError,
    CheckpointDirectoryError,
    CheckpointLockedError,
    DecodeError,
    EncodeError,
    IntegrityError,
    MissingDependencyError,
    ParameterMismatchError,
    SkippedEntry,
    SkippedEntryWarning,
    StorageError,
    UnsafeGlobalError,
    UnsafeNameError,
    ZipsaveError,
    ZipsaveWarning,
)

__all__ = [
    "ArchiveFormatError",
    "ArchiveInfo",
    "ArchiveMember",
    "ArchiveLimitError",
    "ArchiveNotFoundError",
    "Checkpoint",
    "CheckpointDirectoryError",
    "CheckpointLockedError",
    "CheckpointManager",
    "ComponentInfo",
    "DataEntry",
    "DecodeError",
    "EncodeError",
    "EnvState",
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
    "StorageError",
    "TensorInfo",
    "UnsafeGlobalError",
    "UnsafeNameError",
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
