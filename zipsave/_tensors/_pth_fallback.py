"""The ``.pth`` members zipsave's own reader does not read byte for byte (compressed or
big-endian records, records that overlap, tensors saved with hooks or attributes) go through
``torch.load(weights_only=True)`` -- but only after the same metadata unpickler has read their
``data.pkl`` and every tensor it describes was found to lie inside its storage, and with every
tensor it returns checked as any other (:mod:`._invariants`)."""

from __future__ import annotations

import io
import zipfile
from typing import Any

import torch

from .._archive import DEFAULT_LIMITS, crc32
from .._trust import check_legacy_torch, check_torch_zip
from ..exceptions import ArchiveFormatError, ArchiveLimitError, IntegrityError, ZipsaveError
from ._invariants import check_tree, validating_sparse
from ._pth_meta import parse_pickle
from ._tree import BufferView, check_views

__all__ = ["load_torch_bytes", "torch_load"]

_PIECE = 4 << 20


def _census(view: Any) -> None:
    """Read ``data.pkl`` of a torch zip with the metadata unpickler and check its tensors
    against the storage sizes it declares (torch refuses a record of another size)."""
    view.seek(0)
    try:
        with zipfile.ZipFile(view) as inner:
            pickles = [i for i in inner.infolist() if i.filename == "data.pkl" or i.filename.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise ArchiveFormatError("is not a torch.save file (no single data.pkl).")
            with inner.open(pickles[0]) as member:
                member._expected_crc = None  # type: ignore[attr-defined]  # torch may write none; the outer CRC covers it
                payload = member.read()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, OverflowError) as err:
        if isinstance(err, ArchiveFormatError):
            raise
        raise ArchiveFormatError(f"is not a torch.save zip ({type(err).__name__}: {err}).") from err
    finally:
        view.seek(0)
    check_views(parse_pickle(payload))


def torch_load(
    view: Any, device: torch.device, verify_crc: int | None, limits: Any = None, *, census: bool = True
) -> Any:
    """``torch.load(weights_only=True)`` of a member, after checking its CRC, its zip against
    the archive's limits, its pickle's shape (torch's unpickler builds sets and dicts without
    a hash-flood check) and, unless the caller did (``census=False``), its tensors' views;
    torch's sparse checks on, and every tensor returned checked."""
    if verify_crc is not None:
        crc = 0
        buf = bytearray(min(_PIECE, max(view.size, 1)))
        pos = 0
        while pos < view.size:
            n = view.read_at(pos, buf)
            if not n:
                break
            crc = crc32(memoryview(buf)[:n], crc)
            pos += n
        if crc != verify_crc:
            raise IntegrityError(
                f"CRC-32 {crc:08x} does not match the recorded {verify_crc:08x} (corrupted).",
                expected=f"crc32 {verify_crc:08x}",
                found=f"crc32 {crc:08x}",
            )
    view.seek(0)
    limits = limits or DEFAULT_LIMITS
    max_bytes = min(limits.max_member_bytes, limits.max_total_bytes)
    if view.read(2) != b"PK":  # torch < 1.6 wrote its legacy stream (the RL Zoo's oldest agents)
        return _legacy_load(view, device, max_bytes)
    view.seek(0)
    check_torch_zip(view, size=view.size, max_bytes=max_bytes, max_ratio=limits.max_compression_ratio)
    if census:
        _census(view)
    view.seek(0)
    try:
        with validating_sparse():
            tree = torch.load(view, map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch's refusal (a sparse invariant, a size) of these bytes
        text = str(err).rpartition("WeightsUnpickler error: ")[2].strip() or type(err).__name__
        raise ArchiveFormatError(f"is not a loadable torch state (torch.load: {text.splitlines()[0][:300]}).") from err
    return check_tree(tree)


def _legacy_load(view: Any, device: torch.device, max_bytes: int) -> Any:
    """A legacy (torch < 1.6) stream: every storage's element count checked against the bytes
    that follow it before torch reads it; every tensor returned checked."""
    if view.size > max_bytes:
        raise ArchiveLimitError(f"a legacy torch.save stream of {view.size} bytes; the limit is {max_bytes}.")
    payload = bytearray(view.size)
    if view.read_at(0, payload) != view.size:
        raise ArchiveFormatError("ends early (truncated).")
    check_legacy_torch(payload)
    try:
        with validating_sparse():
            tree = torch.load(io.BytesIO(bytes(payload)), map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch's refusal of these bytes
        text = str(err).rpartition("WeightsUnpickler error: ")[2].strip() or type(err).__name__
        raise ArchiveFormatError(f"is not a loadable torch state (torch.load: {text.splitlines()[0][:300]}).") from err
    return check_tree(tree)


def load_torch_bytes(raw: bytes, *, archive: Any = None, member: str | None = None) -> Any:
    """The value ``torch.save`` wrote into ``raw`` (a DCP value or chunk), read as a ``.pth``
    member is: pickle checked first, every tensor returned checked; errors name ``archive``
    and ``member``."""
    try:
        return torch_load(BufferView(bytearray(raw)), torch.device("cpu"), None)
    except ZipsaveError as err:
        err.archive, err.member = err.archive or (str(archive) if archive is not None else None), err.member or member
        err.args = (err._compose(),)
        raise
    except Exception as err:  # noqa: BLE001 - torch's own refusal of these bytes
        raise ArchiveFormatError(
            f"is not a loadable torch value ({type(err).__name__}: {err}).", archive=archive, member=member
        ) from err
