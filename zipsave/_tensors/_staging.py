"""Records -> device memory through two pinned host buffers: the disk read of one piece
overlaps the host-to-device copy of the previous one, and no full CPU copy of a record (or
of the model) is ever made."""

from __future__ import annotations

from typing import Any

import torch

from ..exceptions import ArchiveFormatError

__all__ = ["Stager"]

#: Size of each staging buffer: large enough for the bus, small enough to stay in cache-ish
#: territory and to bound pinned memory (2 x 16 MiB per load).
PIECE = 16 << 20


class Stager:
    """Copies byte ranges of a member into device tensors.

    ``read_into(view, start, length, dest, crcs)`` reads ``length`` bytes at ``start`` of
    ``view`` into the ``uint8`` tensor ``dest`` (on any device), piece by piece: each piece
    is read into a pinned host buffer (plain memory where pinning is impossible, e.g. no
    CUDA), fed to the checksums ``crcs`` (``OrderedCrc``: helper threads), then copied to
    ``dest`` asynchronously. A buffer is reused only after its previous copy finished and
    every checksum ever fed from this stager let go of it.
    """

    def __init__(self, device: torch.device, piece: int = PIECE) -> None:
        self.device = device
        pin = device.type == "cuda" and torch.cuda.is_available()
        self._buffers = [torch.empty(piece, dtype=torch.uint8, pin_memory=pin) for _ in range(2)]
        self._events: list[Any] = [None, None]
        self._next = 0
        self._stream = torch.cuda.current_stream(device) if pin else None
        self.pieces = 0  # how many pieces went through (for tests)
        self._fed: list[Any] = []

    def read_into(self, view: Any, start: int, length: int, dest: torch.Tensor, crcs: list[Any]) -> None:
        piece = self._buffers[0].numel()
        done = 0
        while done < length:
            n = min(piece, length - done)
            i = self._next
            self._next ^= 1
            if self._events[i] is not None:
                self._events[i].synchronize()  # its last copy to the device is done
                self._events[i] = None
            for crc in self._fed:  # the checksum helpers are done with every buffer fed so far
                crc.wait()
            self._fed = list(crcs)
            host = self._buffers[i][:n]
            if view.read_at(start + done, host.numpy()) != n:
                raise ArchiveFormatError("ends inside a storage record (truncated).")
            for crc in crcs:
                crc.feed(host.numpy().data)
            dest[done : done + n].copy_(host, non_blocking=self._stream is not None)
            if self._stream is not None:
                event = torch.cuda.Event()
                event.record(self._stream)
                self._events[i] = event
            done += n
            self.pieces += 1

    def finish(self) -> None:
        """Wait for the last copies and checksums."""
        for crc in self._fed:
            crc.wait()
        self._fed = []
        for event in self._events:
            if event is not None:
                event.synchronize()
        self._events = [None, None]
