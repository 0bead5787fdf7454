"""``arrays/<id>.npy`` members -> numpy arrays, checked before anything is allocated.

``numpy.lib.format.read_array`` allocates whatever shape the header declares before it
reads a byte, so a 200-byte hostile member could ask for terabytes. Here the header is
parsed first, the declared size must equal the bytes the member really holds, and only then
is the array allocated and filled; the member's CRC-32 is checked on the way.

A large array (a replay buffer's frames) is read into its own anonymous mapping of 4 KiB
pages (``_arena.py``), made resident ahead of each read by a helper thread (``_prefault.py``),
never into numpy's own allocation, which advises every large array for huge pages and so,
with ``defrag=madvise`` on a fragmented host, waits for compaction on faults. Huge pages were
slower here too: read into a huge-page mapping, 0.85 GB took 5.5-11 s against 3.1-6.8 s with
prefaulted 4 KiB pages and 9.6-12.6 s into ``np.empty`` (fresh processes, alternating, on the
shared benchmark VM, where free 2 MiB blocks are those the balloon gave back to the host).
Each piece is checksummed right after it is read, while it is in the cache.
With ``mmap=True`` the array is instead a private (copy-on-write) map of the member's bytes.
"""

from __future__ import annotations

import dataclasses
import math
import mmap as _mmap
import sys
import tokenize
from typing import Any, Literal

import numpy as np

from .._archive import crc32
from .._bounds import alloc_budget
from .._items import dtype_problem, item_problem, scrub_items
from ..exceptions import DecodeError, IntegrityError
from ._arena import fresh_map
from ._prefault import PREFAULT_MIN, Prefaulter, mapped_crcs, no_huge_pages

__all__ = [
    "NpyHeader",
    "fresh_copy",
    "fresh_empty",
    "read_array_header",
    "read_array_member",
    "read_array_member_into",
    "read_array_once",
    "read_npy",
]

#: Pieces of a large array read with one call each, then checksummed from the cache.
_PIECE = 4 << 20
#: Arrays smaller than this go to ``np.empty``: a mapping of their own costs more.
_OWN_MAP_MIN = 1 << 20


def _header(view: Any, member: str) -> tuple[tuple[int, ...], bool, np.dtype, int, int]:
    """``(shape, fortran_order, dtype, data offset, data bytes)`` of a checked header."""
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
    except (ValueError, OSError, EOFError, SyntaxError, TypeError, tokenize.TokenError) as err:
        # numpy's retry of a header literal_eval refused tokenizes it: an unclosed bracket is a TokenError
        raise DecodeError(f"array member `{member}` is not a valid .npy file ({err}).") from None
    if dtype.hasobject:
        raise DecodeError(f"array member `{member}` holds Python objects; refusing to read it without pickle.")
    problem = dtype_problem(dtype)
    if problem:
        raise DecodeError(f"array member `{member}`: {problem}.")
    # What numpy would allocate without filling: an unsized dtype (`|S0`, `<U0`, `V0`) becomes
    # one byte per element, a sub-array dtype more elements than the header's shape.
    if dtype.itemsize == 0 or dtype.subdtype is not None:
        raise DecodeError(
            f"array member `{member}` declares dtype {dtype.str}{' (a sub-array)' if dtype.subdtype else ' (0 bytes an item)'}; "
            "an array is built only from bytes the member holds, and np.save writes no such header."
        )
    # numpy's header parser takes any ints: a negative dimension (two make a positive size) or
    # dimensions whose product overflows (a zero beside them makes the size 0) reach reshape.
    negative = any(d < 0 for d in shape)
    if negative or math.prod(max(d, 1) for d in shape) * dtype.itemsize > sys.maxsize:
        raise DecodeError(
            f"array member `{member}` declares shape {tuple(shape)}, which no array has "
            f"({'a negative dimension' if negative else 'its size overflows'}); np.save writes no such header."
        )
    header_end = view.tell()
    nbytes = math.prod(shape) * dtype.itemsize
    walked = math.prod(max(d, 1) for d in shape)
    if walked > alloc_budget(nbytes):  # a zero-size (2**62, 0): 2**62 rows for tolist() and iteration
        raise DecodeError(
            f"array member `{member}` declares shape {tuple(shape)[:8]} of {nbytes} bytes, which stands for {walked} "
            "elements (each zero dimension counted as 1), past the budget of its bytes; np.save writes no such header."
        )
    if nbytes != view.size - header_end:
        raise DecodeError(
            f"array member `{member}` declares {dtype}{list(shape)} ({nbytes} bytes) but holds "
            f"{view.size - header_end} bytes of data."
        )
    return shape, fortran, dtype, header_end, nbytes


def _check_crc(member: str, crc: int, expected: int) -> None:
    if crc != expected:
        raise IntegrityError(
            f"CRC-32 {crc:08x} does not match the recorded {expected:08x} (corrupted).",
            member=member,
            expected=f"crc32 {expected:08x}",
            found=f"crc32 {crc:08x}",
        )


def read_npy(view: Any, *, member: str, expected_crc: int | None = None, mmap: bool = False) -> np.ndarray:
    """Read a ``.npy`` member through a :class:`~zipsave._archive.MemberView`.

    Parameters
    ----------
    view
        The member's bytes (``read``, ``read_at`` and ``size`` are used).
    member
        The member's name, for messages.
    expected_crc
        The CRC-32 the zip directory records for the member; ``None`` skips the check.
    mmap
        Return a private (copy-on-write) map of the member's data where the member is stored
        in a local file with its data aligned for the dtype (else the array is read). Writes
        to the array go to private pages; the file never changes. With ``expected_crc`` the
        member is checked once before the array is made, and the check leaves none of its
        pages resident, so resident memory grows only with what the caller touches.

    Returns
    -------
    numpy.ndarray
        A fresh array owning its memory (or a mapped one).

    Raises
    ------
    DecodeError
        The member is not a ``.npy`` file, declares an object dtype (that would need pickle),
        or its header does not match the number of bytes it holds.
    IntegrityError
        The member's bytes do not match ``expected_crc``.
    """
    shape, fortran, dtype, header_end, nbytes = _header(view, member)
    order: Literal["C", "F"] = "F" if fortran else "C"
    if mmap and nbytes:
        mapped = _mapped(view, member, dtype, header_end, nbytes, expected_crc)
        if mapped is not None and mapped.nbytes == nbytes:
            return _checked_bools(mapped, member).reshape(shape, order=order)
    crc = _head_crc(view, header_end) if expected_crc is not None else 0
    count = nbytes // dtype.itemsize
    fresh = fresh_map(nbytes, huge=False) if nbytes >= _OWN_MAP_MIN else None
    if fresh is None:
        flat = np.empty(count, dtype=dtype)
        buf = flat.view(np.uint8).data if nbytes else memoryview(b"")
    else:
        flat = np.frombuffer(fresh[0], dtype=dtype, count=count)
        buf = memoryview(fresh[0])[:nbytes]
    if flat.dtype != dtype or flat.nbytes != nbytes or buf.nbytes != nbytes:  # every byte returned is one read
        raise DecodeError(
            f"array member `{member}`: numpy made a {flat.dtype} array of {flat.nbytes} bytes for "
            f"{dtype}{list(shape)} ({nbytes} bytes)."
        )
    _fill(view, buf, member, header_end, crc, expected_crc, prefault=fresh is not None)
    return _checked_bools(flat, member).reshape(shape, order=order)


def _checked_bools(flat: np.ndarray, member: str) -> np.ndarray:
    """``flat`` (a member's data, read), refused where a boolean of it is not 0 or 1."""
    problem = item_problem(flat.dtype, flat, f"array member `{member}`")
    if problem:
        raise DecodeError(f"{problem}.")
    return flat


def _fill(
    view: Any, buf: memoryview, member: str, header_end: int, crc: int, expected_crc: int | None, *, prefault: bool
) -> None:
    """Read the member's data into ``buf`` a piece at a time (each made resident ahead of its
    read when ``prefault``), checksumming each piece right after it is read."""
    nbytes = buf.nbytes
    pieces = range(0, nbytes, _PIECE)
    address = np.frombuffer(buf, dtype=np.uint8).ctypes.data if nbytes else 0
    prefaulter = Prefaulter(
        []
        if not prefault or nbytes < PREFAULT_MIN
        else [(address + done, min(_PIECE, nbytes - done)) for done in pieces]
    )
    try:
        for index, done in enumerate(pieces):
            piece = buf[done : done + _PIECE]
            prefaulter.wait(index)
            if view.read_at(header_end + done, piece) != piece.nbytes:
                raise DecodeError(f"array member `{member}` ends early (truncated).")
            if expected_crc is not None:
                crc = crc32(piece, crc)
    finally:
        prefaulter.close()
    if expected_crc is not None:
        _check_crc(member, crc, expected_crc)


def _head_crc(view: Any, header_end: int) -> int:
    head = bytearray(header_end)
    view.read_at(0, head)
    return crc32(head)


def fresh_copy(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``arr`` in fresh memory of its own, made resident ahead of the
    copy as a read is (a background save's snapshot of a replay buffer: ``np.array(copy=True)``
    faults numpy's huge-page-advised memory one page at a time)."""
    src = np.asarray(arr, order="C")
    if src.dtype.hasobject or src.nbytes < _OWN_MAP_MIN:
        return np.array(src, copy=True)
    fresh = fresh_map(src.nbytes, huge=False)
    if fresh is None:
        return np.array(src, copy=True)
    out = np.frombuffer(fresh[0], dtype=src.dtype, count=src.size).reshape(src.shape)
    dst, flat = out.reshape(-1).view(np.uint8), src.reshape(-1).view(np.uint8)
    pieces = range(0, src.nbytes, _PIECE)
    prefaulter = Prefaulter([(out.ctypes.data + done, min(_PIECE, src.nbytes - done)) for done in pieces])
    try:
        for index, done in enumerate(pieces):
            prefaulter.wait(index)
            dst[done : done + _PIECE] = flat[done : done + _PIECE]
    finally:
        prefaulter.close()
    return out


def fresh_empty(like: np.ndarray) -> np.ndarray:
    """An uninitialised C-contiguous array of ``like``'s shape and dtype in fresh memory of its
    own, as :func:`fresh_copy` allocates it; its pages are faulted in as they are first written
    (a background copy fills it chunk by chunk)."""
    if like.dtype.hasobject or like.nbytes < _OWN_MAP_MIN:
        return np.empty(like.shape, like.dtype)
    fresh = fresh_map(like.nbytes, huge=False)
    if fresh is None:
        return np.empty(like.shape, like.dtype)
    return np.frombuffer(fresh[0], dtype=like.dtype, count=like.size).reshape(like.shape)


def _mapped(
    view: Any, member: str, dtype: np.dtype, header_end: int, nbytes: int, expected_crc: int | None
) -> np.ndarray | None:
    """The member's data as a flat array over a private map of the file, or ``None`` where it
    cannot be mapped (no file descriptor, data not aligned for ``dtype``).

    With ``expected_crc`` the whole member is checked once before the array is made, leaving
    none of its pages resident (:func:`._prefault.mapped_crcs`)."""
    fd = getattr(view, "_fd", None)
    start = view.start + header_end
    if fd is None or start % max(dtype.alignment, 1):
        return None
    first = view.start - view.start % _mmap.ALLOCATIONGRANULARITY
    try:
        mapped = _mmap.mmap(fd, view.start + view.size - first, access=_mmap.ACCESS_COPY, offset=first)
    except (OSError, ValueError):
        return None
    if expected_crc is not None:
        crc = mapped_crcs(view, mapped, view.start - first, [(0, view.size)])[0]
        if crc is None:
            raise DecodeError(f"array member `{member}` ends early (truncated).")
        _check_crc(member, crc, expected_crc)
    return np.frombuffer(mapped, dtype=dtype, count=nbytes // dtype.itemsize, offset=start - first)


def read_array_member(reader: Any, member: str, *, verify: bool = True, mmap: bool = False) -> np.ndarray:
    """The ``arrays/<n>.npy`` member ``member`` of an open ``ArchiveReader``, CRC-checked
    (``mmap``: mapped copy-on-write where it can be, see :func:`read_npy`)."""
    view = _open_member(reader, member, verify)
    try:
        return read_npy(view, member=member, expected_crc=reader.info(member).CRC if verify else None, mmap=mmap)
    finally:
        view.close()


def read_array_once(source: Any, member: str, *, verify: bool = True, mmap: bool = False) -> np.ndarray:
    """:func:`read_array_member` of an open ``ArchiveSource``, read at most once while it is
    open: values that name one member under many keys get that one array (zipsave writes a
    member for each array; an 8 MB member named by 200 keys took 1.8 GB)."""
    found = source.arrays.get(member)
    if found is None:
        found = source.arrays[member] = read_array_member(source.reader, member, verify=verify, mmap=mmap)
    return found


@dataclasses.dataclass(frozen=True)
class NpyHeader:
    """What an ``arrays/<n>.npy`` member's checked header declares, its data not yet read: a
    stand-in for the array while a restore decides where the data goes (``shape`` and ``dtype``
    as an array has them)."""

    member: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool

    def as_declared(self, arr: np.ndarray, archive: Any) -> np.ndarray:
        """``arr``, the member read later, refused unless it is still what this header declared
        when it was checked (:class:`IntegrityError`: the archive changed while it was read)."""
        if arr.shape != self.shape or arr.dtype != self.dtype:
            raise IntegrityError(
                f"holds {arr.dtype}{list(arr.shape)}, but declared {self.dtype}{list(self.shape)} when it was "
                "checked (the archive changed while it was read).",
                archive=archive,
                member=self.member,
            )
        return arr


def _open_member(reader: Any, member: str, verify: bool) -> Any:
    if not member.endswith(".npy") or member not in reader:
        raise DecodeError(f"refers to array member `{member}`, which the archive does not hold.")
    if verify:
        reader.check_recorded(member)
    return reader.open_view(member)


def read_array_header(reader: Any, member: str, *, verify: bool = True) -> NpyHeader:
    """The checked header of the ``.npy`` member ``member`` (its declared size is the bytes it
    holds; see :func:`read_npy`), reading none of its data."""
    view = _open_member(reader, member, verify)
    try:
        shape, fortran, dtype, _, _ = _header(view, member)
    finally:
        view.close()
    return NpyHeader(member, tuple(shape), dtype, fortran)


def read_array_member_into(reader: Any, member: str, dest: np.ndarray, *, verify: bool = True) -> None:
    """Read the ``.npy`` member ``member`` straight into ``dest`` (C-contiguous and writeable,
    of the member's shape and dtype in C order), made resident ahead of each read and
    CRC-checked as :func:`read_npy` reads into memory of its own. On an error ``dest`` may
    hold part of the member's data: the caller decides what that leaves behind.

    Raises
    ------
    DecodeError
        The member is not a ``.npy`` file of ``dest``'s shape and dtype, or ends early.
    IntegrityError
        The member's bytes do not match the CRC-32 the zip directory records.
    """
    view = _open_member(reader, member, verify)
    try:
        shape, fortran, dtype, header_end, nbytes = _header(view, member)
        if (
            tuple(shape) != dest.shape
            or dtype != dest.dtype
            or (fortran and dest.ndim > 1)
            or not dest.flags.c_contiguous
            or not dest.flags.writeable
        ):
            kind = ", ".join(
                k
                for k, bad in (
                    ("read-only", not dest.flags.writeable),
                    ("not C-contiguous", not dest.flags.c_contiguous),
                )
                if bad
            )
            raise DecodeError(
                f"array member `{member}` holds {dtype}{list(shape)}{' in Fortran order' if fortran else ''}; it is "
                f"read in place only into a C-contiguous, writeable array of that shape and dtype, not into a "
                f"{dest.dtype}{list(dest.shape)} array{f' ({kind})' if kind else ''}."
            )
        expected_crc = reader.info(member).CRC if verify else None
        crc = _head_crc(view, header_end) if expected_crc is not None else 0
        buf = dest.reshape(-1).view(np.uint8).data if nbytes else memoryview(bytearray(0))
        if nbytes >= PREFAULT_MIN:
            no_huge_pages(dest.ctypes.data, nbytes)  # a live buffer never trained is numpy's untouched zeros
        _fill(view, buf, member, header_end, crc, expected_crc, prefault=True)
        try:
            _checked_bools(dest.reshape(-1), member)
        except DecodeError:  # the live array keeps no item numpy never writes: a bool of 2 reads as True
            scrub_items(dest)
            raise
    finally:
        view.close()
