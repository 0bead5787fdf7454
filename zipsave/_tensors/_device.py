"""Where a load puts its tensors: the ``device=`` argument of every loading verb, resolved and
checked before a byte is read."""

from __future__ import annotations

from typing import Any

import torch

from ..exceptions import DeviceError

__all__ = ["get_device"]


def get_device(device: Any = "auto", *, mmap: bool = False) -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU (SB3's rule); anything else via ``torch.device``.

    With ``mmap``, ``"auto"`` is the CPU: a mapping lives in host memory, and a caller who asks
    for one wants file-backed tensors (``torch.load(mmap=True)`` keeps them there too); naming a
    device still moves them.

    CUDA asked for where there is none falls back to the CPU, as in SB3. Any other device this
    machine cannot use (``"mps"`` without Metal, ``"cuda:3"`` on a one-GPU machine) is a
    :class:`~zipsave.DeviceError` here (a ``ValueError`` and, as torch raises through SB3's
    ``load``, a ``RuntimeError``), before a byte is read, not a corrupt-looking member later.
    """
    if device is None or (isinstance(device, str) and device == "auto"):
        device = "cuda" if torch.cuda.is_available() and not mmap else "cpu"
    try:
        dev = device if isinstance(device, torch.device) else torch.device(device)
    except (RuntimeError, TypeError, ValueError) as err:
        raise DeviceError(
            f"device={device!r} is not a torch device ({err}).",
            hint="Pass 'auto', 'cpu', 'cuda', 'cuda:1' or a torch.device.",
        ) from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        return torch.device("cpu")
    if dev.type not in ("cpu", "meta"):
        try:
            torch.empty(0, device=dev)
        except (RuntimeError, AssertionError) as err:
            raise DeviceError(
                f"device={device!r} is not available on this machine ({str(err).splitlines()[0]}).",
                hint="Pass device='auto' or 'cpu'.",
            ) from err
    return dev
