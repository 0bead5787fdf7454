"""Linux libc calls that Python's ``os`` and ``mmap`` modules lack (``sync_file_range``,
``madvise(MADV_POPULATE_WRITE)`` on torch's memory), loaded once through ctypes."""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

__all__ = ["libc_function"]


@functools.cache
def libc_function(name: str, argtypes: tuple[Any, ...]) -> Any:
    """The C library's ``name`` with ``argtypes`` and an ``int`` result, or ``None`` off Linux
    or where the C library lacks it. ctypes releases the GIL for the call."""
    if not sys.platform.startswith("linux"):
        return None
    try:  # the process's own symbols include the C library's: no ldconfig run (find_library)
        func = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        try:
            from ctypes.util import find_library

            func = getattr(ctypes.CDLL(find_library("c") or None, use_errno=True), name)
        except (OSError, AttributeError):
            return None
    func.argtypes = list(argtypes)
    func.restype = ctypes.c_int
    return func
