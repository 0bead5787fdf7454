"""A state dict -> a ``.pth`` member: genuine ``torch.save`` output streamed into the
archive with torch's own CRC pass off (zipsave's writer hashes the bytes as they go)."""

from __future__ import annotations

import threading
from typing import Any

import torch

from ._pth_records import RecordingStream

__all__ = ["save_pth"]

_crc_option_lock = threading.Lock()


# -- saving --------------------------------------------------------------------------------
def save_pth(stream: Any, obj: Any) -> None:
    """``torch.save(obj)`` into ``stream`` without torch's own CRC pass.

    The outer zip's CRC-32 covers the same bytes and is computed while they are written, so
    torch's per-record CRC would be a second pass over every tensor for nothing. The inner
    records then carry a CRC of 0, which ``torch.load`` accepts. Each record's own CRC-32
    comes from the same pass and is set on ``stream.records`` (when the stream has that
    attribute) for ``manifest.json``'s per-tensor checksums.
    """
    recorder = RecordingStream(stream)
    with _crc_option_lock:
        previous = torch.serialization.get_crc32_options()
        torch.serialization.set_crc32_options(False)
        try:
            torch.save(obj, recorder)  # type: ignore[arg-type]  # a binary stream, as torch needs
        finally:
            torch.serialization.set_crc32_options(previous)
    if hasattr(stream, "records"):
        stream.records = recorder.records()


# -- metadata ------------------------------------------------------------------------------
