"""Copying loads populate fresh host memory on a helper thread ahead of the reads
(``zipsave._tensors._prefault``), and the tensors they return are ordinary ones."""

from __future__ import annotations

import ctypes
import errno
import gc
import mmap
import os
import subprocess
import sys
import threading

import pytest
import torch

import zipsave
from zipsave._tensors import _arena, _prefault
from zipsave._tensors._arena import ARENA_MIN, free_huge_blocks, host_arena
from zipsave._tensors._prefault import PREFAULT_MIN, Prefaulter, populate


def _resident_kib(address: int, length: int) -> int | None:
    """Resident KiB of the pages of ``[address, address + length)`` (``mincore``), ``None``
    where part of the range is not mapped. Only those pages count: whatever other threads of
    this busy process allocate or free meanwhile (its RSS) moves nothing here."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    page = mmap.PAGESIZE
    start = address // page * page
    pages = (address + length - start + page - 1) // page
    vec = (ctypes.c_ubyte * pages)()
    if libc.mincore(start, pages * page, vec) != 0:
        if ctypes.get_errno() == errno.ENOMEM:
            return None
        raise OSError(ctypes.get_errno(), "mincore")
    return sum(b & 1 for b in vec) * page // 1024


def _model(megabytes: int) -> torch.nn.Module:
    torch.manual_seed(0)
    width = int((megabytes * 2**20 / 4 / 2) ** 0.5)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, width))


def _grows(tensor: torch.Tensor) -> bool:
    try:
        tensor.clone().set_(tensor.untyped_storage(), 0, tensor.shape, tensor.stride()).resize_(tensor.numel() + 1)
    except RuntimeError:
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")
def test_populate_makes_fresh_memory_resident():
    if not populate(torch.empty(1 << 16, dtype=torch.uint8).data_ptr(), 1 << 16):
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)")
    fresh = mmap.mmap(-1, 64 << 20)  # never touched (torch.empty may reuse resident memory)
    pointer = ctypes.c_char.from_buffer(fresh)
    address = ctypes.addressof(pointer)
    before = _resident_kib(address, len(fresh))
    assert populate(address, len(fresh))
    assert _resident_kib(address, len(fresh)) - before > 60 << 10  # 64 MiB became resident without being touched
    del pointer


def _vm_flags(address: int) -> set[str]:
    """The ``VmFlags`` of the mapping holding ``address`` (/proc/self/smaps)."""
    flags, inside = set(), False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and head == "VmFlags:":
                flags = set(line.split()[1:])
    return flags


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/smaps are Linux's")
def test_reading_into_a_live_array_advises_it_against_huge_pages(tmp_path):
    # numpy advises large arrays for huge pages; faulting one in compacts memory on a fragmented
    # host, so an in-place read (restore into a live replay buffer) turns the advice off first
    import numpy as np

    from zipsave._archive import ArchiveReader
    from zipsave._tensors import read_array_member_into

    saved = np.arange(16 << 20, dtype=np.uint8).reshape(16, -1)
    zipsave.save({"buffer": saved}, tmp_path / "a.zip")
    live = np.zeros_like(saved)
    middle = live.ctypes.data + live.nbytes // 2
    with open(tmp_path / "a.zip", "rb") as f:
        reader = ArchiveReader(f)
        member = next(n for n in reader.names() if n.endswith(".npy"))
        read_array_member_into(reader, member, live)
    assert np.array_equal(live, saved)
    assert "nh" in _vm_flags(middle)


def test_prefaulter_populates_every_piece_in_order(monkeypatch):
    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(_prefault, "populate", lambda address, length: seen.append((address, length)) or True)
    monkeypatch.setattr(_prefault, "_madvise", lambda: object())
    pieces = [(i << 22, 4 << 20) for i in range(5)]
    prefaulter = Prefaulter(pieces)
    prefaulter.wait(4)
    prefaulter.close()
    assert seen == pieces


def test_a_failing_madvise_releases_every_waiter(monkeypatch):
    monkeypatch.setattr(_prefault, "populate", lambda address, length: False)
    monkeypatch.setattr(_prefault, "_madvise", lambda: object())
    prefaulter = Prefaulter([(0, 4 << 20)] * 4)
    waiter = threading.Thread(target=prefaulter.wait, args=(3,))
    waiter.start()
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    prefaulter.close()


def test_small_members_start_no_thread():
    prefaulter = Prefaulter([(0, PREFAULT_MIN - 1)])
    assert prefaulter._thread is None
    prefaulter.wait(0)  # returns at once


@pytest.mark.parametrize("path", ["arena", "prefaulted", "plain"])
def test_large_copying_loads_are_exact_and_independent(tmp_path, monkeypatch, path):
    monkeypatch.setattr(_arena, "_huge_pages_free", lambda nbytes: path == "arena")
    monkeypatch.setattr(_arena, "allocator_free_bytes", lambda: 0)
    if path == "plain":
        monkeypatch.setattr(_prefault, "_madvise", lambda: None)
    model = _model(24)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, model[0].in_features)).sum().backward()
    optimizer.step()
    zipsave.save({"model": model, "optimizer": optimizer}, tmp_path / "m.zip")
    _, parts, _ = zipsave.load_archive(tmp_path / "m.zip")
    state = parts["model"]
    for key, value in model.state_dict().items():
        assert torch.equal(state[key], value), key
    saved_state = optimizer.state_dict()["state"]
    for index, entry in parts["optimizer"]["state"].items():
        for name, value in entry.items():
            assert torch.equal(value, saved_state[index][name]), (index, name)
    # each tensor owns exactly its own storage: freeing, resizing and saving one touch no other
    storages = {t.untyped_storage().data_ptr() for t in state.values()}
    assert len(storages) == len(state)
    weight = state["0.weight"]
    assert weight.untyped_storage().nbytes() == weight.nbytes
    torch.save(model.state_dict(), tmp_path / "m.pt")
    peer = torch.load(tmp_path / "m.pt")["0.weight"]
    assert _grows(weight) == _grows(peer)  # resizing behaves as for torch.load's tensors
    weight.resize_(16)  # shrinking in place always works
    assert torch.equal(weight, model[0].weight.detach().reshape(-1)[:16])
    fresh = _model(24)
    fresh.load_state_dict({k: v for k, v in state.items() if k != "0.weight"}, strict=False)
    assert torch.equal(fresh[1].weight, model[1].weight)


_BUDDYINFO = """\
Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3
Node 0, zone    DMA32      2      3      0      2      3      2      1      4      4      2    752
Node 0, zone   Normal  10238   5017   1686    810    291     82    249    758    592    523   3295
"""


def test_free_huge_blocks_counts_every_block_of_2_mib_or_more():
    # order 9 blocks are 2 MiB, order 10 blocks 4 MiB (two huge pages each)
    assert free_huge_blocks(_BUDDYINFO) == (1 + 2 * 3) + (2 + 2 * 752) + (523 + 2 * 3295)
    assert free_huge_blocks("") == 0


@pytest.fixture
def huge_pages_free(monkeypatch):
    """Huge pages free, and the C allocator holding no free memory a load could reuse."""
    monkeypatch.setattr(_arena, "_huge_pages_free", lambda nbytes: True)
    monkeypatch.setattr(_arena, "allocator_free_bytes", lambda: 0)


@pytest.fixture(autouse=True)
def no_idle_arenas():
    """Each test starts and ends without idle arenas (another test's would be reused)."""
    _arena.release_idle()
    yield
    _arena.release_idle()


def test_no_arena_for_small_members(huge_pages_free):
    assert host_arena([ARENA_MIN // 2]) is None
    arena = host_arena([ARENA_MIN])
    assert arena is not None and arena.fresh


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/smaps are Linux's")
@pytest.mark.parametrize("free", [True, False])
def test_a_fresh_arena_asks_for_huge_pages_only_where_they_are_free(monkeypatch, huge_pages_free, free):
    monkeypatch.setattr(_arena, "_huge_pages_free", lambda nbytes: free)
    arena = host_arena([ARENA_MIN])
    assert arena is not None and arena.fresh
    flags = _vm_flags(arena.parts[0][0].data_ptr())
    assert ("hg" in flags) is free  # never advised where a huge-page fault would compact memory


def test_no_arena_where_the_allocator_holds_enough_free_memory(monkeypatch, huge_pages_free):
    monkeypatch.setattr(_arena, "allocator_free_bytes", lambda: ARENA_MIN + 64)
    assert host_arena([ARENA_MIN]) is None  # torch.empty reuses those resident pages
    monkeypatch.setattr(_arena, "allocator_free_bytes", lambda: ARENA_MIN - 1)
    assert host_arena([ARENA_MIN]) is not None


def test_huge_pages_are_off_unless_asked_for(monkeypatch):
    monkeypatch.setattr(_arena, "HUGE_PAGES", False)
    assert not _arena._huge_pages_free(1)


_FREED_HEAP = """
from zipsave._tensors import _arena
chunks = [bytearray(64 << 10) for _ in range(256)]  # 16 MiB below the mmap threshold: heap memory
before = _arena.allocator_free_bytes()
del chunks[::2]
print(before, _arena.allocator_free_bytes())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or _arena._mallinfo2() is None, reason="glibc's mallinfo2")
def test_allocator_free_bytes_sees_freed_heap_memory():
    # A fresh process with one arena that never trims its top: in this busy process another
    # thread's allocations, or glibc returning a free top to the OS, move the count either way.
    env = dict(
        os.environ, MALLOC_ARENA_MAX="1", MALLOC_TRIM_THRESHOLD_=str(1 << 30), MALLOC_MMAP_THRESHOLD_=str(1 << 20)
    )
    out = subprocess.run([sys.executable, "-c", _FREED_HEAP], env=env, capture_output=True, text=True, check=True)
    before, after = map(int, out.stdout.split())
    assert after >= before + (4 << 20)


def test_arena_tensors_are_separate_storages_and_free_the_arena_with_the_last(huge_pages_free, tmp_path):
    arena = host_arena([40 << 20, 1000, 0])
    assert arena is not None
    tensors = [tensor for tensor, _ in arena.parts]
    for (_, view), value in zip(arena.parts, (1, 2, 3)):
        view[:] = bytes([value]) * view.nbytes
    del arena, _, view  # only the tensors hold the arena now
    assert [t.untyped_storage().nbytes() for t in tensors] == [40 << 20, 1000, 0]
    assert len({t.data_ptr() for t in tensors[:2]}) == 2 and tensors[1].data_ptr() % 64 == 0
    torch.save(tensors[1], tmp_path / "one.pt")
    assert (tmp_path / "one.pt").stat().st_size < 4096  # only its own 1000 bytes
    assert torch.equal(torch.load(tmp_path / "one.pt"), torch.full((1000,), 2, dtype=torch.uint8))
    tensors[0].fill_(0)
    assert tensors[1].eq(2).all()  # independent bytes
    assert not _arena._idle
    del tensors[1:]
    gc.collect()
    assert not _arena._idle  # one tensor still holds it
    if sys.platform.startswith("linux"):
        start = tensors[0].data_ptr()  # the arena's first byte
        assert _resident_kib(start, 40 << 20) > 35 << 10  # every byte was written
        del tensors
        gc.collect()
        assert len(_arena._idle) == 1  # kept for the next load, its pages lazily freed
        assert _arena.release_idle() >= 40 << 20
        assert not _arena._idle
        gc.collect()
        # the 40 MiB arena is unmapped (a small mapping made since may lie in its range)
        after = _resident_kib(start, 40 << 20)
        assert after is None or after < 4 << 10, after


def test_the_next_load_reuses_an_idle_arena_of_about_its_size(monkeypatch, huge_pages_free):
    monkeypatch.setattr(_arena, "KEEP_ARENAS", 4)  # the three below stay idle together
    arena = host_arena([80 << 20])
    assert arena is not None and arena.fresh
    address = arena.parts[0][0].data_ptr()
    arena.parts[0][1][:] = b"\1" * (80 << 20)
    del arena
    gc.collect()
    assert host_arena([100 << 20]).fresh  # too small for it: a fresh one (idle once freed)
    assert host_arena([ARENA_MIN]).fresh  # over twice its size is too wasteful
    again = host_arena([70 << 20, 1000])  # the smallest idle arena that fits
    assert again is not None and not again.fresh  # resident pages: nothing to prefault
    assert again.parts[0][0].data_ptr() == address
    assert sorted(len(each) for each in _arena._idle) == [ARENA_MIN, 100 << 20]
    monkeypatch.setattr(_arena, "allocator_free_bytes", lambda: 1 << 40)
    assert not host_arena([ARENA_MIN]).fresh  # an idle arena goes first: it is this load's own


def test_a_loop_of_copying_loads_reads_into_the_arenas_of_the_previous_load(tmp_path, huge_pages_free):
    model = _model(40)
    zipsave.save({"model": model}, tmp_path / "m.zip")
    first = zipsave.load_archive(tmp_path / "m.zip")[1]["model"]
    addresses = {key: t.data_ptr() for key, t in first.items()}
    for tensor in first.values():
        tensor.zero_()  # the next load must not see these bytes
    del first, tensor
    gc.collect()
    assert len(_arena._idle) == 1
    again = zipsave.load_archive(tmp_path / "m.zip")[1]["model"]
    assert {key: t.data_ptr() for key, t in again.items()} == addresses
    for key, value in model.state_dict().items():
        assert torch.equal(again[key], value), key


def test_idle_arenas_are_bounded(monkeypatch, huge_pages_free):
    monkeypatch.setattr(_arena, "KEEP_ARENAS", 2)
    monkeypatch.setattr(_arena, "KEEP_BYTES", 3 * ARENA_MIN + (8 << 20))
    arenas = [host_arena([ARENA_MIN]) for _ in range(3)]
    addresses = [arena.parts[0][0].data_ptr() for arena in arenas]
    del arenas
    gc.collect()
    assert [a.parts[0][0].data_ptr() for a in (host_arena([ARENA_MIN]), host_arena([ARENA_MIN]))] != addresses[:2]
    _arena.release_idle()
    big = host_arena([4 * ARENA_MIN])
    del big
    gc.collect()
    assert not _arena._idle  # larger than KEEP_BYTES alone: unmapped at once


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_reuses_no_arena_of_its_parent(huge_pages_free):
    arena = host_arena([ARENA_MIN])
    del arena
    gc.collect()
    assert len(_arena._idle) == 1
    pid = os.fork()
    if pid == 0:  # the child: its copy of the idle arena is shared copy-on-write with the parent
        again = host_arena([ARENA_MIN])
        os._exit(0 if again is not None and again.fresh else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(_arena._idle) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore")
def test_arena_holds_no_more_than_its_tensors_bytes(huge_pages_free):
    lengths = [(32 << 20) + 12345, 100_000]  # ends 112 KiB into the 17th huge page
    arena = host_arena(lengths)
    assert arena is not None
    parts = arena.parts
    for _, view in parts:
        view[:] = b"\1" * view.nbytes  # every byte touched, as a load does
    start = parts[0][0].data_ptr()
    used = sum((n + 63) // 64 * 64 for n in lengths)
    # the arena's own span (whole huge pages), page by page: a neighbouring mapping of another
    # test is not counted, even where the kernel merged it with the arena's
    resident = _resident_kib(start, (used + (2 << 20) - 1) // (2 << 20) * (2 << 20))
    # a whole 17th huge page would add 1.9 MiB; allow a little for what else the kernel maps
    assert used // 1024 <= resident <= used // 1024 + 512


def _stored_member(path, size: int) -> tuple[int, int]:
    """A zip holding one stored member of ``size`` bytes; its data offset and CRC-32."""
    import zipfile
    import zlib

    data = os.urandom(size)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("m.bin", data)
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("m.bin")
    with open(path, "rb") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
    return info.header_offset + 30 + name_len + extra_len, zlib.crc32(data)


@pytest.mark.parametrize("in_place", [True, False])
def test_stored_crc_checks_a_member_from_the_file(tmp_path, monkeypatch, in_place):
    from zipsave._archive._views import MemberView

    monkeypatch.setattr(_prefault, "CHECK_IN_PLACE", in_place and _prefault.CHECK_IN_PLACE)
    monkeypatch.setattr(_prefault, "CHECK_WINDOW", 100_000)  # several windows, none on a page boundary
    size = 3 * 2**20 + 12345
    start, crc = _stored_member(tmp_path / "a.zip", size)
    lock = threading.Lock()
    with open(tmp_path / "a.zip", "rb") as f:
        assert _prefault.stored_crc(MemberView(f, start, size, lock)) == crc
        assert _prefault.stored_crc(MemberView(f, start, 0, lock)) == 0
        assert _prefault.stored_crc(MemberView(f, start, size + 2**20, lock)) is None  # past the file end
    with open(tmp_path / "a.zip", "rb") as f:
        import io

        buffered = io.BytesIO(f.read())  # no file descriptor: read, not mapped
        assert _prefault.stored_crc(MemberView(buffered, start, size, lock)) == crc


def test_check_stored_finds_a_flipped_byte_before_anything_is_read(tmp_path):
    import zipfile

    from zipsave._core import LoadSession

    path = tmp_path / "m.zip"
    zipsave.save_archive(path, params={"policy": _model(2).state_dict()})
    with LoadSession(path) as session:
        session.check_stored("policy.pth")
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("policy.pth")
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
        f.seek(info.header_offset + 30 + name_len + extra_len + info.file_size // 2)
        byte = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([byte ^ 1]))
    with LoadSession(path) as session:
        with pytest.raises(zipsave.IntegrityError, match="member `policy.pth`: CRC-32 .* does not match the recorded"):
            session.check_stored("policy.pth")
        with pytest.raises(zipsave.DecodeError, match="member `nothing.pth`: is missing"):
            session.check_stored("nothing.pth")


def test_small_members_are_under_the_sizes_at_which_arenas_and_prefaulting_start():
    """A member read whole (``_pth_read._SMALL_MEMBER``) skips the arena and the prefaulter
    without asking them: both would have declined storages that small."""
    from zipsave._tensors import _pth_read

    assert _pth_read._SMALL_MEMBER <= min(ARENA_MIN, PREFAULT_MIN)
