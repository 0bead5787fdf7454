"""zipsave: save reinforcement-learning models to one readable zip archive, and load them
back without running pickled code."""

from typing import TYPE_CHECKING

from ._lazy import lazy_attributes
from ._version import __version__
from .exceptions import (
    AlgorithmMismatchError,
    ArchiveFormatError,
    ArchiveLimitError,
    ArchiveNotFoundError,
    CheckpointDirectoryError,
    CheckpointLockedError,
    DecodeError,
    DeviceError,
    EncodeError,
    IntegrityError,
    MissingDependencyError,
    ParameterMismatchError,
    SignatureError,
    SkippedEntry,
    SkippedEntryWarning,
    StorageError,
    UnsafeGlobalError,
    UnsafeNameError,
    UsageError,
    ZipsaveError,
    ZipsaveWarning,
)

if TYPE_CHECKING:  # what __getattr__ below imports on first use, spelled out for type checkers
    from ._api import (
        EnvState,
        RNGState,
        Saveable,
        SaveHandle,
        load,
        load_archive,
        release_snapshots,
        restore,
        save,
        save_archive,
    )
    from ._archive import Limits
    from ._core import LoadReport
    from ._manager import Checkpoint, CheckpointManager
    from ._sign import SignatureInfo, Signer, Trust, sign, verify_signature
    from ._tools import ArchiveInfo, ArchiveMember, ComponentInfo, DataEntry, TensorInfo, inspect, read

# The public names whose modules load on first use (PEP 562), so that ``import zipsave`` costs
# little and a load imports what it uses: not the checkpoint manager, the inspection tools or
# the background saver unless it uses them. ``{name: module}``.
_LAZY: dict[str, str] = {
    "EnvState": "._api._env_state",
    "RNGState": "._api._rng",
    "SaveHandle": "._api._background",
    "Saveable": "._api._saveable",
    "release_snapshots": "._api._shadow",
    **dict.fromkeys(("load", "load_archive", "restore"), "._api._load"),
    **dict.fromkeys(("save", "save_archive"), "._api._save"),
    "Limits": "._archive",
    "LoadReport": "._core",
    **dict.fromkeys(("Checkpoint", "CheckpointManager"), "._manager"),
    **dict.fromkeys(("ArchiveInfo", "ArchiveMember", "ComponentInfo", "DataEntry", "TensorInfo"), "._tools"),
    **dict.fromkeys(("inspect", "read"), "._tools"),
    # the `sign` extra: model_signing itself is imported only when something is signed or checked
    **dict.fromkeys(("SignatureInfo", "Signer", "Trust", "sign", "verify_signature"), "._sign"),
}
# The private submodules ``import zipsave`` used to import as a side effect, found as attributes
# of the package as before (``zipsave._registry`` after a bare ``import zipsave``).
_SUBMODULES = frozenset(
    {
        "_api",
        "_archive",
        "_bounds",
        "_codec",
        "_core",
        "_format",
        "_json",
        "_manager",
        "_optional",
        "_registry",
        "_system_info",
        "_tensors",
        "_tools",
        "_trust",
    }
)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES)


__all__ = [
    "AlgorithmMismatchError",
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
    "DeviceError",
    "EncodeError",
    "EnvState",
    "IntegrityError",
    "MissingDependencyError",
    "Limits",
    "LoadReport",
    "ParameterMismatchError",
    "RNGState",
    "SignatureError",
    "SignatureInfo",
    "Signer",
    "SaveHandle",
    "Saveable",
    "SkippedEntry",
    "SkippedEntryWarning",
    "StorageError",
    "TensorInfo",
    "Trust",
    "UnsafeGlobalError",
    "UnsafeNameError",
    "UsageError",
    "ZipsaveError",
    "ZipsaveWarning",
    "__version__",
    "inspect",
    "load",
    "load_archive",
    "read",
    "release_snapshots",
    "restore",
    "save",
    "save_archive",
    "sign",
    "verify_signature",
]
