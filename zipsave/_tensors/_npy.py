"""``arrays/<id>.npy`` members -> numpy arrays, checked before anything is allocated.

``numpy.lib.format.read_array`` allocates whatever shape the header declares before it
reads a byte, so a 200-byte hostile member could ask for terabytes. Here the header is
parsed first, the declared size must equal the bytes the member really holds, and only then
is the array allocated and filled; the member's CRC-32 is checked on the way.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._archive import crc32
from ..exceptions import DecodeError, IntegrityError

__all__ = ["read_array_member", "read_npy"]

_CHUNK = 16 << 20


def read_npy(view: Any, *, member: str, expected_crc: int | None = None) -> np.ndarray:
    """Read a ``.npy`` member through a :class:`~zipsave._archive.MemberView`.

    Parameters
    ----------
    view
        The member's bytes (``read``, ``read_at`` and ``size`` are used).
    member
        The member's name, for messages.
    expected_crc
        The CRC-32 the zip directory records for the member; ``None`` skips the check.

    Returns
    -------
    numpy.ndarray
        A fresh array owning its memory.

    Raises
    ------
    DecodeError
        The member is not a ``.npy`` file, declares an object dtype (that would need pickle),
        or its header does not match the number of bytes it holds.
    IntegrityError
        The member's bytes do not match ``expected_crc``.
    """
    fmt = np.lib.format
    view.seek(0)
    try:
        version = fmt.read_magic(view)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(view)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = fmt.read_array_header_2_0(view)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as err:
        raise DecodeError(f"array member `{member}` is not a valid .npy file ({err}).") from None
    if dtype.hasobject:
        raise DecodeError(f"array member `{member}` holds Python objects; refusing to read it without pickle.")
    header_end = view.tell()
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if nbytes != view.size - header_end:
        raise DecodeError(
            f"array member `{member}` declares {dtype}{list(shape)} ({nbytes} bytes) but holds "
            f"{view.size - header_end} bytes of data."
        )
    crc = 0
    if expected_crc is not None:
        head = bytearray(header_end)
        view.read_at(0, head)
        crc = crc32(head)
    flat = np.empty(count, dtype=dtype)
    buf = flat.view(np.uint8).data if nbytes else memoryview(b"")
    done = 0
    while done < nbytes:
        piece = buf[done : done + _CHUNK]
        n = view.read_at(header_end + done, piece)
        if n != piece.nbytes:
            raise DecodeError(f"array member `{member}` ends early (truncated).")
        if expected_crc is not None:
            crc = crc32(piece, crc)
        done += n
    if expected_crc is not None and crc != expected_crc:
        raise IntegrityError(
            f"CRC-32 {crc:08x} does not match the recorded {expected_crc:08x} (corrupted).",
            member=member,
            expected=f"crc32 {expected_crc:08x}",
            found=f"crc32 {crc:08x}",
        )
    return flat.reshape(shape, order="F" if fortran else "C")


def read_array_member(reader: Any, member: str, *, verify: bool = True) -> np.ndarray:
    """The ``arrays/<n>.npy`` member ``member`` of an open ``ArchiveReader``, CRC-checked."""
    if not member.endswith(".npy") or member not in reader:
        raise DecodeError(f"refers to array member `{member}`, which the archive does not hold.")
    if verify:
        reader.check_recorded(member)
    view = reader.open_view(member)
    try:
        return read_npy(view, member=member, expected_crc=reader.info(member).CRC if verify else None)
    finally:
        view.close()
