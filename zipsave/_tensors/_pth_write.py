"""Devices, and a state dict -> a ``.pth`` member: genuine ``torch.save`` output streamed into the
archive with torch's own CRC pass off (zipsave's writer hashes the bytes as they go)."""

from __future__ import annotations

import threading
from typing import Any

import torch

from ._pth_records import RecordingStream

__all__ = ["get_device", "save_pth"]

_crc_option_lock = threading.Lock()


def get_device(device: Any = "auto", *, mmap: bool = False) -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU (SB3's rule); anything else via ``torch.device``.

    With ``mmap``, ``"auto"`` is the CPU: a mapping lives in host memory, and a caller who asks
    for one wants file-backed tensors (``torch.load(mmap=True)`` keeps them there too); naming a
    device still moves them.

    CUDA asked for where there is none falls back to the CPU, as in SB3. Any other device this
    machine cannot use (``"mps"`` without Metal, ``"cuda:3"`` on a one-GPU machine) is a
    ``ValueError`` here, before a byte is read, not a corrupt-looking member later.
    """
    if device is None or (isinstance(device, str) and device == "auto"):
        device = "cuda" if torch.cuda.is_available() and not mmap else "cpu"
    try:
        dev = device if isinstance(device, torch.device) else torch.device(device)
    except (RuntimeError, TypeError, ValueError) as err:
        raise ValueError(
            f"device={device!r} is not a torch device ({err}). Pass 'auto', 'cpu', 'cuda', 'cuda:1' or a torch.device."
        ) from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu")
    if dev.type not in ("cpu", "meta"):
        try:
            torch.empty(0, device=dev)
        except (RuntimeError, AssertionError) as err:
            raise ValueError(
                f"device={device!r} is not available on this machine ({str(err).splitlines()[0]}). Pass device='auto' or 'cpu'."
            ) from err
    return dev


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
