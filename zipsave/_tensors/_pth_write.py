"""A state dict -> a ``.pth`` member: genuine ``torch.save`` output streamed into the
archive with torch's own CRC pass off (zipsave's writer hashes the bytes as they go), and
which values a member may hold so that zipsave's weights-only reader reads them back."""

from __future__ import annotations

import collections
import threading
from typing import Any

import numpy as np
import torch

from ..exceptions import EncodeError
from ._pth_records import RecordingStream

__all__ = ["WEIGHTS_ONLY_CONTAINERS", "WEIGHTS_ONLY_LEAVES", "check_weights_only", "save_pth"]

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


# -- what a member holds -------------------------------------------------------------------
#: What ``torch.load(weights_only=True)`` reads back, by exact type (a subclass of a container,
#: a namedtuple, a ``defaultdict``, is a global it refuses).
WEIGHTS_ONLY_LEAVES = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    bytearray,
    torch.Size,
    torch.dtype,
    torch.device,
    torch.layout,
)
WEIGHTS_ONLY_CONTAINERS = (dict, collections.OrderedDict, list, tuple, set)


def check_weights_only(name: str, value: Any, path: str = "", depth: int = 0) -> None:
    """A state dict of your own stateful object (a replay buffer) becomes a ``.pth`` member,
    which zipsave reads only with torch's ``weights_only`` loader. Values that ``torch.save``
    writes and that loader refuses (numpy arrays and scalars, subclasses of the builtin
    containers) would make an archive no load can read, so they are refused here. Other
    objects are left to ``torch.save``: most of them fail there, before the archive is in place."""
    if isinstance(value, torch.Tensor) or type(value) in WEIGHTS_ONLY_LEAVES or depth > 100:
        return
    if type(value) in WEIGHTS_ONLY_CONTAINERS:
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            check_weights_only(name, item, f"{path}[{key!r}]", depth + 1)
        return
    refused = isinstance(value, (np.ndarray, np.generic, dict, list, tuple, set, frozenset, collections.deque))
    if not refused:
        return
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    raise EncodeError(
        f"`{name}.state_dict(){path}` is a {kind}, which torch's safe loader (`weights_only=True`, the only way "
        "zipsave reads `.pth` members) refuses, so the archive could not be loaded; nothing was written.",
        key=name,
        hint=(
            "Return tensors, numbers, strings and dicts/lists/tuples of them from `state_dict` (a numpy array as "
            "`torch.from_numpy(array)`, converted back in `load_state_dict`), or keep such values as plain "
            "app-state values (arrays, lists, deques), which `restore` fills in place."
        ),
    )
