"""CRC-32 on helper threads: combining pieces gives zlib's CRC of the whole stream."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import warnings
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import zipsave
from zipsave._archive import _crc, _crc_pool


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_combine_matches_zlib(a, b):
    assert _crc_pool.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_the_written_out_shift_table_is_the_computed_one():
    assert list(_crc_pool._X2N) == _crc_pool._x2n_table()


def test_combine_long_second_part():
    b = os.urandom(3 << 20)
    assert _crc_pool.crc32_combine(zlib.crc32(b"x"), zlib.crc32(b), len(b)) == zlib.crc32(b"x" + b)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5000), max_size=12))
def test_ordered_crc_of_mixed_pieces(sizes):
    data = np.random.default_rng(len(sizes)).integers(0, 256, sum(sizes) + 1, dtype=np.uint8)
    old = (_crc.PARALLEL_MIN, _crc_pool.PIECE)
    _crc.PARALLEL_MIN, _crc_pool.PIECE = 1000, 700  # small pieces go inline, others to the pool
    try:
        crc = _crc_pool.OrderedCrc()
        pos = 0
        for n in sizes:
            crc.feed(memoryview(data)[pos : pos + n])
            pos += n
        assert crc.value() == zlib.crc32(memoryview(data)[:pos])
        assert crc.size == pos
    finally:
        _crc.PARALLEL_MIN, _crc_pool.PIECE = old


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 3000), max_size=10))
def test_crc32_many_gives_each_buffer_its_own_crc(sizes):
    rng = np.random.default_rng(len(sizes))
    buffers = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    old = (_crc.PARALLEL_MIN, _crc_pool.PIECE)
    _crc.PARALLEL_MIN, _crc_pool.PIECE = 1000, 700  # several pieces per buffer, shared with the helper
    try:
        assert _crc_pool.crc32_many(buffers) == [zlib.crc32(b) for b in buffers]
    finally:
        _crc.PARALLEL_MIN, _crc_pool.PIECE = old


def test_crc32_many_of_large_typed_buffers_uses_the_helper(monkeypatch):
    buffers = [np.arange(3 << 20, dtype=np.int32), np.ones(5, dtype=np.float64), b""]
    threads = set()
    real = _crc.crc32

    def spy(piece, *args):
        threads.add(threading.get_ident())
        return real(piece, *args)

    monkeypatch.setattr(_crc, "crc32", spy)
    monkeypatch.setattr(_crc_pool, "PIECE", 1 << 20)
    for _ in range(20):  # the helper usually takes a piece at once; allow for a slow start
        threads.clear()
        assert _crc_pool.crc32_many(buffers) == [zlib.crc32(memoryview(b).cast("B")) for b in buffers]
        if len(threads) == 2:
            break
    assert len(threads) == 2


def test_pool_is_remade_in_a_forked_child():
    if not hasattr(os, "fork"):
        return
    _crc_pool.pool()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads running
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            crc = _crc_pool.OrderedCrc()
            crc.feed(b"\1" * (4 << 20))
            os._exit(0 if crc.value() == zlib.crc32(b"\1" * (4 << 20)) else 1)
        except BaseException:  # noqa: BLE001 - any failure in the child is a failed test
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_inline_ordered_crc_checksums_on_the_callers_thread(monkeypatch):
    def no_pool():
        raise AssertionError("an inline OrderedCrc used the helper pool")

    monkeypatch.setattr(_crc_pool, "pool", no_pool)
    buffers = [os.urandom(_crc.PARALLEL_MIN * 3 + 5), np.arange(1 << 19, dtype=np.float32), b"x" * 100]
    crc = _crc_pool.OrderedCrc(inline=True)
    for buf in buffers:
        crc.feed(buf)
    assert crc.value() == zlib.crc32(b"".join(bytes(memoryview(b).cast("B")) for b in buffers))


def test_fresh_loads_checksum_inline_and_restores_on_the_helper(tmp_path, monkeypatch):
    """Into fresh memory the bytes are checksummed from the cache right after each read; into
    live tensors a helper thread checksums beside the reads (docs/benchmarks.rst, issue 18)."""
    net = torch.nn.Linear(1024, 1024)  # a 4 MiB weight: over PARALLEL_MIN
    zipsave.save({"net": net}, tmp_path / "a.zip")
    submitted = []
    real_pool = _crc_pool.pool

    class Counting:
        def submit(self, *args, **kwargs):
            submitted.append(args[0])
            return real_pool().submit(*args, **kwargs)

    monkeypatch.setattr(_crc_pool, "pool", Counting)
    loaded = zipsave.load(tmp_path / "a.zip", device="cpu")  # the host path; CUDA goes through the stager
    assert torch.equal(loaded["net"]["weight"], net.weight) and submitted == []
    live = {"net": torch.nn.Linear(1024, 1024)}
    zipsave.restore(live, tmp_path / "a.zip")
    assert torch.equal(live["net"].weight, net.weight) and submitted


@pytest.mark.parametrize("starts", [0, 1], ids=["no_thread", "one_of_two"])
def test_where_no_thread_can_start_the_callers_thread_checksums(monkeypatch, starts):
    """CPython 3.12+ refuses new threads once the interpreter begins to exit, where a pending
    background save is still writing: the pool's tasks then run on the caller's thread."""
    real_start = threading.Thread.start
    started = []

    def start(self):
        if len(started) >= starts:
            raise RuntimeError("can't create new thread at interpreter shutdown")
        started.append(self)
        real_start(self)

    monkeypatch.setattr(_crc_pool, "_pool", None)
    monkeypatch.setattr(threading.Thread, "start", start)
    data = os.urandom(_crc.PARALLEL_MIN * 3 + 5)
    assert _crc_pool.crc32_many([data, data]) == [zlib.crc32(data)] * 2
    crc = _crc_pool.OrderedCrc()
    crc.feed(data)
    assert crc.value() == zlib.crc32(data)
    assert isinstance(_crc_pool.pool(), _crc_pool._Inline)
    for thread in started:
        thread.join(10)  # the one helper that started ends: nothing waits on it
        assert not thread.is_alive()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6000), st.integers(0, 3000)), max_size=8))
def test_crc32_read_checks_each_span_of_a_file(spans):
    data = np.random.default_rng(len(spans)).integers(0, 256, 7000, dtype=np.uint8).tobytes()

    def read_at(offset, buf):
        chunk = data[offset : offset + len(buf)]
        buf[: len(chunk)] = chunk
        return len(chunk)

    old = (_crc.PARALLEL_MIN, _crc_pool.READ_PIECE)
    _crc.PARALLEL_MIN, _crc_pool.READ_PIECE = 1000, 700  # several pieces per span, shared with the helper
    try:
        want = [zlib.crc32(data[o : o + n]) if o + n <= len(data) else None for o, n in spans]
        assert _crc_pool.crc32_read(read_at, spans) == want  # a span past the end is None
    finally:
        _crc.PARALLEL_MIN, _crc_pool.READ_PIECE = old


def test_crc32_read_raises_a_read_error_after_both_threads_stop(monkeypatch):
    monkeypatch.setattr(_crc_pool, "READ_PIECE", 1 << 16)
    calls = []

    def read_at(offset, buf):
        calls.append(offset)
        if offset == 5 << 16:
            raise OSError("EIO")
        return len(buf)

    with pytest.raises(OSError, match="EIO"):
        _crc_pool.crc32_read(read_at, [(0, 64 << 20)])
    assert len(calls) < 64 << 4  # the first error stopped the rest


@pytest.mark.parametrize(
    "make",
    [
        bytes,
        bytearray,
        lambda raw: memoryview(raw),
        lambda raw: memoryview(np.frombuffer(raw[: len(raw) // 4 * 4], dtype=np.float32)),  # nbytes, not items
        lambda raw: memoryview(raw)[1::3],  # strided: refused by both alike
    ],
)
def test_crc32_is_zlibs_before_and_after_isal_takes_over(make):
    raw = os.urandom(10_000)
    for value in (0, 0xDEADBEEF):
        try:
            expected = zlib.crc32(make(raw), value)
        except (BufferError, TypeError, ValueError) as err:
            with pytest.raises(type(err)):
                _crc.crc32(make(raw), value)
            continue
        assert _crc.crc32(make(raw), value) == expected
        big = os.urandom(_crc.ISAL_BUFFER)  # takes the process past the switch
        assert _crc.crc32(big, value) == zlib.crc32(big, value)
        assert _crc.crc32(make(raw), value) == expected


_SWITCH = """
import os, sys, zlib
from zipsave._archive import _crc
small = os.urandom(_crc.ISAL_BUFFER - 1)
large = os.urandom(_crc.ISAL_BUFFER)
if sys.argv[1] == "many":  # small buffers until ISAL_AFTER bytes, then ISA-L
    count = -(-_crc.ISAL_AFTER // len(small))
    for _ in range(count - 1):
        assert _crc.crc32(small) == zlib.crc32(small)
    before = "isal" in sys.modules
    assert _crc.crc32(small) == zlib.crc32(small)
else:  # one large buffer: ISA-L from it on
    assert _crc.crc32(small) == zlib.crc32(small)
    before = "isal" in sys.modules
    assert _crc.crc32(large) == zlib.crc32(large)
print(before, "isal" in sys.modules, _crc.backend())
"""


@pytest.mark.parametrize("how", ["many", "large"])
@pytest.mark.parametrize("forced", [False, True], ids=["default", "ZIPSAVE_CRC=zlib"])
def test_isal_is_imported_only_after_enough_bytes(forced, how):
    """A small archive never imports ISA-L (0.9 ms of a first call); a large one switches to it."""
    env = dict(os.environ)
    env.pop("ZIPSAVE_CRC", None)
    if forced:
        env["ZIPSAVE_CRC"] = "zlib"
    out = subprocess.run([sys.executable, "-c", _SWITCH, how], capture_output=True, text=True, check=True, env=env)
    before, after, backend = out.stdout.split()
    assert before == "False"
    assert (after, backend) == (("False", "zlib") if forced else ("True", "isal"))
