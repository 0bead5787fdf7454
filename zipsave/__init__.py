"""zipsave: save reinforcement-learning models to one readable zip archive, and load them
back without running pickled code."""

from ._archive import Limits
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
from ._version import __version__
from .exceptions import (
    ArchiveFormatError,
    ArchiveLimitError,
    DecodeError,
    EncodeError,
    IntegrityError,
    ParameterMismatchError,
    UnsafeGlobalError,
    ZipsaveError,
    ZipsaveWarning,
)
from .saveable import Saveable

__all__ = [
    "ArchiveFormatError",
    "ArchiveLimitError",
    "DecodeError",
    "EncodeError",
    "IntegrityError",
    "Limits",
    "LoadReport",
    "ParameterMismatchError",
    "Saveable",
    "SkippedEntry",
    "SkippedEntryWarning",
    "UnsafeGlobalError",
    "ZipsaveError",
    "ZipsaveWarning",
    "__version__",
    "load",
    "load_archive",
    "restore",
    "save",
    "save_archive",
]
