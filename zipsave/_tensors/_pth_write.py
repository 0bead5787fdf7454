"""Devices, and a state dict -> a ``.pth`` member: genuine ``torch.save`` output streamed into the
archive with torch's own CRC pass off (zipsave's writer hashes the bytes as they go)."""

from __future__ import annotations

import threading
from typing import Any

import torch

__all__ = ["get_device", "save_pth"]

_crc_option_lock = threading.Lock()


def get_device(device: Any = "auto") -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU (SB3's rule); anything else via ``torch.device``."""
    if isinstance(device, torch.device):
        return device
    if device == "auto" or device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu")
    return dev


# -- saving --------------------------------------------------------------------------------
def save_pth(stream: Any, obj: Any) -> None:
    """``torch.save(obj)`` into ``stream`` without torch's own CRC pass.

    The outer zip's CRC-32 covers the same bytes and is computed while they are written, so
    torch's per-record CRC would be a second pass over every tensor for nothing. The inner
    records then carry a CRC of 0, which ``torch.load`` accepts.
    """
    with _crc_option_lock:
        previous = torch.serialization.get_crc32_options()
        torch.serialization.set_crc32_options(False)
        try:
            torch.save(obj, stream)
        finally:
            torch.serialization.set_crc32_options(previous)


# -- metadata ------------------------------------------------------------------------------
