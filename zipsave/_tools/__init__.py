"""The reading tools: inspect, read, diff, extract and verify, all on the one archive reader
(:class:`zipsave._archive.ArchiveSource`); none of them unpickles or ``torch.load``-s."""

from ._diff import diff
from ._extract import extract
from ._inspect import inspect
from ._read import read
from ._records import ArchiveInfo, ArchiveMember, ComponentInfo, DataEntry, TensorInfo
from ._sharded import describe_sharded, is_checkpoint_dir, render_sharded, verify_sharded
from ._verify import verify

__all__ = [
    "ArchiveInfo",
    "ArchiveMember",
    "ComponentInfo",
    "DataEntry",
    "TensorInfo",
    "describe_sharded",
    "diff",
    "extract",
    "inspect",
    "is_checkpoint_dir",
    "read",
    "render_sharded",
    "verify",
    "verify_sharded",
]
