"""zipsave as a ``torch.distributed.checkpoint`` (DCP) storage: sharded saves from many ranks,
resharding on load, and consolidation into one ordinary archive.

Importing :mod:`zipsave` does not import this package (nor ``torch.distributed``).
"""

from __future__ import annotations

from .._tools import verify_sharded as verify
from ._api import load, save
from ._consolidate import consolidate
from ._reader import ZipReader
from ._writer import ZipWriter

__all__ = ["ZipReader", "ZipWriter", "consolidate", "load", "save", "verify"]
