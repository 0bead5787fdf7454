"""A tiny pickle assembler for hostile payloads: any global by name, any opcode sequence,
bodies of plain values around them. Nothing here imports what it names."""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any


class Emit:
    """Raw opcodes spliced where this object is pickled."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __call__(self, *args: Any) -> None:  # pickle insists a REDUCE target looks callable
        raise AssertionError("never called")

    def __add__(self, other: Emit | bytes) -> Emit:
        return Emit(self.data + (other.data if isinstance(other, Emit) else other))


class _Pickler(pickle._Pickler):  # type: ignore[misc,name-defined]
    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        if isinstance(obj, Emit):
            self.write(obj.data)
            return
        super().save(obj, save_persistent_id)


def body(obj: Any) -> bytes:
    """The opcodes that push ``obj`` (no PROTO, FRAME, STOP, memo)."""
    buf = io.BytesIO()
    pickler = _Pickler(buf, protocol=3)
    pickler.fast = True
    pickler.dump(obj)
    raw = buf.getvalue()
    assert raw[:2] == b"\x80\x03" and raw[-1:] == pickle.STOP
    return raw[2:-1]


def text(value: str) -> bytes:
    raw = value.encode()
    return (
        pickle.SHORT_BINUNICODE + bytes([len(raw)]) + raw
        if len(raw) < 256
        else pickle.BINUNICODE + struct.pack("<I", len(raw)) + raw
    )


def G(module: str, name: str) -> Emit:
    """The global ``module.name`` (STACK_GLOBAL)."""
    return Emit(text(module) + text(name) + pickle.STACK_GLOBAL)


def call(func: Emit, *args: Any) -> Emit:
    """``func(*args)`` (REDUCE)."""
    return Emit(func.data + body(tuple(args)) + pickle.REDUCE)


def newobj(cls: Emit, *args: Any, state: Any = None) -> Emit:
    """``cls.__new__(cls, *args)`` (NEWOBJ), then BUILD with ``state`` when given."""
    out = cls.data + body(tuple(args)) + pickle.NEWOBJ
    if state is not None:
        out += body(state) + pickle.BUILD
    return Emit(out)


def build(obj: Emit, state: Any) -> Emit:
    return Emit(obj.data + body(state) + pickle.BUILD)


def program(obj: Any, proto: int = 4) -> bytes:
    """A whole pickle that pushes ``obj``."""
    return b"\x80" + bytes([proto]) + body(obj) + pickle.STOP


def raw_program(ops: bytes, proto: int = 4) -> bytes:
    return b"\x80" + bytes([proto]) + ops + pickle.STOP


def colliding_ints(n: int, residue: int = 12345) -> list[int]:
    """``n`` distinct ints with one hash (congruent modulo 2**61 - 1)."""
    modulus = (1 << 61) - 1
    return [residue + k * modulus for k in range(n)]
