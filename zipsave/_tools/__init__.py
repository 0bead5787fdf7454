"""The reading tools: inspect, read, diff, extract and verify, all on the one archive reader
(:class:`zipsave._archive.ArchiveSource`); none of them unpickles or ``torch.load``-s."""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:  # what __getattr__ below imports on first use, spelled out for type checkers
    from .._registry import handlers
    from .._sign import check_source
    from ._check import check_archive
    from ._diff import diff
    from ._extract import extract
    from ._inspect import inspect
    from ._read import read
    from ._records import ArchiveInfo, ArchiveMember, ComponentInfo, DataEntry, TensorInfo
    from ._sharded import describe_sharded, is_checkpoint_dir, render_sharded, verify_sharded
    from ._shown import json_leaf, value_json, value_text, whole_integers
    from ._verify import verify

# Each name's module, imported on first use (PEP 562), so that a load imports the modules it
# uses and not the whole package. ``{name: module}`` (``module:attribute`` where renamed).
_LAZY: dict[str, str] = {
    "check_archive": "._check",
    "check_source": ".._sign",  # a signature, checked only when `trust=` is given
    "handlers": ".._registry",  # the integrations of a folder not saved from a dict
    "diff": "._diff",
    "extract": "._extract",
    "inspect": "._inspect",
    "read": "._read",
    **dict.fromkeys(("ArchiveInfo", "ArchiveMember", "ComponentInfo", "DataEntry", "TensorInfo"), "._records"),
    **dict.fromkeys(("describe_sharded", "is_checkpoint_dir", "render_sharded", "verify_sharded"), "._sharded"),
    **dict.fromkeys(("json_leaf", "value_json", "value_text", "whole_integers"), "._shown"),
    "verify": "._verify",
}
# Its modules, found as attributes as when this file imported them all.
_SUBMODULES = frozenset(
    {"_check", "_diff", "_extract", "_inspect", "_read", "_records", "_render", "_sharded", "_shown", "_verify"}
)

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES)

__all__ = [
    "ArchiveInfo",
    "ArchiveMember",
    "ComponentInfo",
    "DataEntry",
    "TensorInfo",
    "check_archive",
    "check_source",
    "describe_sharded",
    "diff",
    "extract",
    "handlers",
    "inspect",
    "is_checkpoint_dir",
    "json_leaf",
    "read",
    "render_sharded",
    "value_json",
    "value_text",
    "whole_integers",
    "verify",
    "verify_sharded",
]
