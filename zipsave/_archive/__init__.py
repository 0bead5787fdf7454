"""The archive: zip reading and writing (aligned stored members, hashing overlapped with I/O,
the manifest), the limits that keep hostile archives from hurting the reader, and
destinations (paths with atomic replacement, fsspec URLs, file objects).

This layer knows zip files and bytes; it knows nothing about models, JSON values or torch.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:  # what __getattr__ below imports on first use, spelled out for type checkers
    from ._crc import backend as crc_backend
    from ._crc import crc32
    from ._crc_pool import OrderedCrc, crc32_combine, crc32_many, crc32_read, share_work
    from ._crc_pool import submit as pool_submit
    from ._destination import binary_file, destination_key, is_url, open_output, open_source
    from ._files import atomic_output, libc_function, open_input, seekable, with_suffix
    from ._handlers import data_bytes, member_names, saved_as_app_state
    from ._limits import DEFAULT_LIMITS, Limits
    from ._progress import check as check_progress
    from ._progress import counting_reader, counting_writer, describe, make_bar
    from ._reader import ArchiveReader, manifest_digest
    from ._remote import remote_input, remote_output
    from ._source import ArchiveSource, parse_version
    from ._views import MemberView
    from ._writer import ArchiveWriter, MemberInfo
    from ._zipfmt import check_name as check_member_name

# Each name's module, imported on first use (PEP 562), so that a load imports the modules it
# uses and not the whole package. ``{name: module}`` (``module:attribute`` where renamed).
_LAZY: dict[str, str] = {
    "crc_backend": "._crc:backend",
    "crc32": "._crc",
    **dict.fromkeys(("OrderedCrc", "crc32_combine", "crc32_many", "crc32_read", "share_work"), "._crc_pool"),
    "pool_submit": "._crc_pool:submit",
    **dict.fromkeys(("binary_file", "destination_key", "is_url", "open_output", "open_source"), "._destination"),
    **dict.fromkeys(("data_bytes", "member_names", "saved_as_app_state"), "._handlers"),
    **dict.fromkeys(("atomic_output", "open_input", "seekable", "with_suffix"), "._files"),
    "libc_function": "._files",
    **dict.fromkeys(("DEFAULT_LIMITS", "Limits"), "._limits"),
    "check_progress": "._progress:check",
    **dict.fromkeys(("counting_reader", "counting_writer", "describe", "make_bar"), "._progress"),
    **dict.fromkeys(("ArchiveReader", "manifest_digest"), "._reader"),
    **dict.fromkeys(("remote_input", "remote_output"), "._remote"),
    **dict.fromkeys(("ArchiveSource", "parse_version"), "._source"),
    "MemberView": "._views",
    **dict.fromkeys(("ArchiveWriter", "MemberInfo"), "._writer"),
    "check_member_name": "._zipfmt:check_name",
}
# Its modules, found as attributes as when this file imported them all.
_SUBMODULES = frozenset(
    {
        "_crc",
        "_crc_pool",
        "_destination",
        "_files",
        "_handlers",
        "_limits",
        "_progress",
        "_reader",
        "_remote",
        "_source",
        "_structure",
        "_views",
        "_writer",
        "_zipfmt",
    }
)

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES)

__all__ = [
    "crc_backend",
    "DEFAULT_LIMITS",
    "ArchiveReader",
    "ArchiveSource",
    "ArchiveWriter",
    "Limits",
    "MemberInfo",
    "MemberView",
    "OrderedCrc",
    "atomic_output",
    "binary_file",
    "check_member_name",
    "check_progress",
    "counting_reader",
    "counting_writer",
    "crc32",
    "crc32_combine",
    "crc32_many",
    "crc32_read",
    "data_bytes",
    "describe",
    "destination_key",
    "is_url",
    "libc_function",
    "make_bar",
    "manifest_digest",
    "member_names",
    "open_input",
    "open_output",
    "open_source",
    "parse_version",
    "pool_submit",
    "remote_input",
    "remote_output",
    "saved_as_app_state",
    "seekable",
    "share_work",
    "with_suffix",
]
