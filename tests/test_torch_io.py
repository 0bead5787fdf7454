"""State dicts <-> ``.pth`` members: exact restores over a zoo of tensors through every
entry point (fresh, mmap, in place), genuine ``torch.save`` members, mismatches, corruption,
and the ``torch.load`` fallback."""

from __future__ import annotations

import io
import re
import struct
import zipfile

import numpy as np
import pytest
import torch

import zipsave
from zipsave._archive import ArchiveWriter, _crc, _crc_pool
from zipsave._tensors import TensorRef, read_pth_meta
from zipsave._tensors import _pth_read as _torch_io

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.bool,
]


def _values(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(0, 100, shape, generator=gen).to(dtype)


def zoo(seed=0):
    """Tensors of every kind a state dict may hold."""
    out = {f"dtype.{str(d).removeprefix('torch.')}": _values((3, 5), d, seed) for d in DTYPES}
    base = _values((6, 8), torch.float32, seed + 1)
    out |= {
        "empty": torch.empty(0),
        "empty_2d": torch.empty(3, 0, dtype=torch.int64),
        "scalar": torch.tensor(3.5 + seed),
        "scalar_int": torch.tensor(7 + seed, dtype=torch.int64),
        "transposed": _values((4, 7), torch.float32, seed + 2).t(),
        "strided": _values((10, 6), torch.float64, seed + 3)[::3, 1::2],
        "base": base,
        "view_of_base": base[2:5],  # shares storage with "base"
        "large": _values((700, 1000), torch.float32, seed + 4),  # 2.8 MB: the large-member path
        "large_bf16": _values((1100, 1000), torch.bfloat16, seed + 5),
    }
    return out


def assert_same(a, b, where="tree"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.stride() == b.stride() or not a.numel(), where
        here = b.detach().to(a.device)  # device="auto" loads onto CUDA where there is one
        assert torch.equal(a.detach(), here) if a.dtype != torch.bool else bool((a == here).all()), where
        assert a.requires_grad == b.requires_grad, where
        assert isinstance(a, torch.nn.Parameter) == isinstance(b, torch.nn.Parameter), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.fixture(params=["default", "tiny-pieces"])
def io_mode(request, monkeypatch):
    """Run each test through the small-member path and, with tiny thresholds, through the
    large-member path: records read in many pieces, CRC on the helper threads."""
    if request.param == "tiny-pieces":
        monkeypatch.setattr(_torch_io, "_SMALL_MEMBER", 0)
        monkeypatch.setattr(_torch_io, "_PIECE", 4096)
        monkeypatch.setattr(_crc, "PARALLEL_MIN", 1024)
        monkeypatch.setattr(_crc_pool, "PIECE", 2048)
    return request.param


class Holder:
    """A stateful object (not a module) whose state dict is a tree of live tensors."""

    def __init__(self, tensors):
        self.tensors = tensors

    def state_dict(self):
        return {"tensors": dict(self.tensors), "meta": {"kind": "holder", "n": len(self.tensors)}}

    def load_state_dict(self, state):
        for key, value in state["tensors"].items():
            current = self.tensors.get(key)
            if current is value:
                continue
            if current is not None and current.shape == value.shape and current.dtype == value.dtype:
                current.copy_(value)
            else:
                self.tensors[key] = value


class ZooModule(torch.nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.enc = torch.nn.Linear(6, 8)
        self.dec = torch.nn.Linear(8, 6)
        self.dec.weight = torch.nn.Parameter(self.enc.weight.t().contiguous())
        self.head = torch.nn.Linear(8, 3)
        self.tied = self.head  # the same module twice: tied weights in the state dict
        self.frozen = torch.nn.Parameter(_values((4,), torch.float32, seed), requires_grad=False)
        self.big = torch.nn.Parameter(_values((600, 600), torch.float32, seed))
        for d in DTYPES:
            self.register_buffer(f"buf_{str(d).removeprefix('torch.')}", _values((2, 3), d, seed))
        self.register_buffer("buf_empty", torch.empty(0, 4))
        self.register_buffer("buf_scalar", torch.tensor(seed, dtype=torch.int64))


# -- fresh loads ---------------------------------------------------------------------------
def test_fresh_load_of_the_zoo_is_exact(tmp_path, io_mode):
    saved = zoo()
    path = tmp_path / "zoo.zip"
    zipsave.save_archive(path, params={"zoo": saved})
    _, params, _ = zipsave.load_archive(path)
    loaded = params["zoo"]
    assert_same(saved, loaded)
    # shared storage stays shared, separate storages stay separate
    assert loaded["view_of_base"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    loaded["base"][2, 0] = 1234.0
    assert loaded["view_of_base"][0, 0] == 1234.0
    assert loaded["large"].untyped_storage().data_ptr() != loaded["base"].untyped_storage().data_ptr()


def test_fresh_load_keeps_parameters_and_requires_grad(tmp_path, io_mode):
    saved = {
        "p": torch.nn.Parameter(torch.randn(3, 4)),
        "frozen": torch.nn.Parameter(torch.randn(2), requires_grad=False),
        "leaf": torch.randn(5).requires_grad_(True),
        "plain": torch.randn(5),
    }
    path = tmp_path / "p.zip"
    zipsave.save_archive(path, params={"x": saved})
    loaded = zipsave.load_archive(path)[1]["x"]
    assert_same(saved, loaded)


def test_mmap_load_is_exact_and_lazy(tmp_path, io_mode):
    saved = zoo()
    path = tmp_path / "zoo.zip"
    zipsave.save({"zoo": Holder(saved)}, path)
    loaded = zipsave.load(path, mmap=True)["zoo"]
    assert_same(saved, loaded["tensors"])
    assert loaded["meta"] == {"kind": "holder", "n": len(saved)}
    # Copy-on-write: writing to a mapped tensor never reaches the file.
    loaded["tensors"]["large"].zero_()
    again = zipsave.load(path)["zoo"]["tensors"]
    assert torch.equal(again["large"], saved["large"])


def test_model_round_trip_through_load(tmp_path, io_mode):
    module = ZooModule(seed=1)
    path = tmp_path / "m.zip"
    zipsave.save({"module": module}, path)
    loaded = zipsave.load(path)["module"]
    assert_same(module.state_dict(), loaded)


# -- restores in place ---------------------------------------------------------------------
def _live_pointers(module):
    return {k: (v, v.data_ptr()) for k, v in module.state_dict(keep_vars=True).items()}


def test_restore_module_in_place_keeps_identity(tmp_path, io_mode):
    saved = ZooModule(seed=1)
    path = tmp_path / "m.zip"
    zipsave.save({"module": saved}, path)
    target = ZooModule(seed=2)
    before = _live_pointers(target)
    versions = {k: v._version for k, (v, _) in before.items()}
    zipsave.restore({"module": target}, path)
    assert_same(saved.state_dict(), target.state_dict())
    after = target.state_dict(keep_vars=True)
    for key, (tensor, ptr) in before.items():
        assert after[key] is tensor and tensor.data_ptr() == ptr, key
    assert target.dec.weight.requires_grad and not target.frozen.requires_grad
    assert target.tied is target.head
    # A write into a parameter's memory counts as an in-place change for autograd.
    assert all(after[k]._version > versions[k] for k in after if after[k].numel())


def test_restore_into_non_contiguous_target_copies(tmp_path, io_mode):
    saved = torch.nn.Linear(5, 7)
    path = tmp_path / "m.zip"
    zipsave.save({"layer": saved}, path)
    target = torch.nn.Linear(5, 7)
    target.weight = torch.nn.Parameter(torch.randn(5, 7).t())  # same shape, not contiguous
    ptr = target.weight.data_ptr()
    zipsave.restore({"layer": target}, path)
    assert torch.equal(target.weight, saved.weight) and target.weight.data_ptr() == ptr
    assert not target.weight.is_contiguous()


def test_restore_stateful_holder_in_place(tmp_path, io_mode):
    saved = zoo(seed=0)
    path = tmp_path / "h.zip"
    zipsave.save({"holder": Holder(saved)}, path)
    live = zoo(seed=5)
    pointers = {k: v.data_ptr() for k, v in live.items() if v.numel() and v.is_contiguous()}
    holder = Holder(dict(live))
    zipsave.restore({"holder": holder}, path)
    assert_same(saved, holder.tensors)
    for key, ptr in pointers.items():
        assert holder.tensors[key].data_ptr() == ptr, key


def _stepped(opt_cls, seed, **kwargs):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    opt = opt_cls(model.parameters(), **kwargs)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(16, 20)).pow(2).mean().backward()
        opt.step()
    return model, opt


OPTIMIZERS = [
    (torch.optim.Adam, {"lr": 1e-3}),
    (torch.optim.AdamW, {"lr": 1e-3, "weight_decay": 0.1, "amsgrad": True}),
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
]


@pytest.mark.parametrize("opt_cls,kwargs", OPTIMIZERS, ids=lambda v: getattr(v, "__name__", ""))
def test_optimizer_state_restores_in_place_and_training_continues_identically(tmp_path, io_mode, opt_cls, kwargs):
    model, opt = _stepped(opt_cls, 0, **kwargs)
    path = tmp_path / "o.zip"
    zipsave.save({"model": model, "opt": opt}, path)
    model2, opt2 = _stepped(opt_cls, 1, **kwargs)
    state_before = {id(t): t for s in opt2.state.values() for t in s.values() if isinstance(t, torch.Tensor)}
    zipsave.restore({"model": model2, "opt": opt2}, path)
    assert_same(opt.state_dict(), opt2.state_dict())
    assert_same(model.state_dict(), model2.state_dict())
    state_after = [t for s in opt2.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    assert all(id(t) in state_before for t in state_after), "optimizer state was replaced, not filled"
    x = torch.randn(4, 20)
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m(x).sum().backward()
        o.step()
    assert_same(model.state_dict(), model2.state_dict())


def test_optimizer_state_into_a_fresh_optimizer(tmp_path, io_mode):
    model, opt = _stepped(torch.optim.Adam, 0)
    path = tmp_path / "o.zip"
    zipsave.save({"model": model, "opt": opt}, path)
    torch.manual_seed(3)
    model2 = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    opt2 = torch.optim.Adam(model2.parameters())  # no state yet: it is adopted, not filled
    zipsave.restore({"model": model2, "opt": opt2}, path)
    assert_same(opt.state_dict(), opt2.state_dict())


def test_every_in_place_entry_point(tmp_path, io_mode):
    from models import Algo

    saved = Algo(seed=0).train_step(3)
    path = tmp_path / "algo.zip"
    saved.save(path)
    expected = {
        "policy": saved.policy.state_dict(),
        "policy.optimizer": saved.policy.optimizer.state_dict(),
    }

    def check(algo, pointers):
        assert_same(expected["policy"], algo.policy.state_dict())
        assert_same(expected["policy.optimizer"], algo.policy.optimizer.state_dict())
        for key, tensor in algo.policy.state_dict(keep_vars=True).items():
            assert tensor.data_ptr() == pointers[key], key

    def fresh():
        algo = Algo(seed=9).train_step(1)
        return algo, {k: v.data_ptr() for k, v in algo.policy.state_dict(keep_vars=True).items()}

    algo, pointers = fresh()
    zipsave.restore(algo, path)
    check(algo, pointers)
    algo, pointers = fresh()
    algo.set_parameters(path)
    check(algo, pointers)
    algo, pointers = fresh()
    assert algo.load(path) is algo
    check(algo, pointers)
    algo, pointers = fresh()
    zipsave.restore(algo, path, verify=False)
    check(algo, pointers)
    loaded = Algo.load(path)
    assert_same(expected["policy"], loaded.policy.state_dict())
    assert torch.equal(loaded.log_ent_coef, saved.log_ent_coef)


# -- genuine .pth members ------------------------------------------------------------------
def test_members_are_genuine_torch_save_output(tmp_path, io_mode):
    module = ZooModule(seed=1)
    holder = Holder(zoo())
    path = tmp_path / "m.zip"
    zipsave.save({"module": module, "holder": holder}, path)
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        for name, expected in (("module.pth", module.state_dict()), ("holder.pth", holder.state_dict())):
            assert zf.getinfo(name).compress_type == zipfile.ZIP_STORED
            loaded = torch.load(io.BytesIO(zf.read(name)), weights_only=True)
            assert_same(expected, loaded)


def test_tensor_records_are_aligned_in_the_outer_file(tmp_path):
    path = tmp_path / "m.zip"
    zipsave.save({"holder": Holder(zoo())}, path)
    with zipsave._archive.ArchiveSource(path) as src:
        view = src.reader.open_view("holder.pth")
        meta = read_pth_meta(view)
        for start, _length in meta.records.values():
            assert (view.start + start) % 64 == 0


def test_sb3_reads_the_archive(tmp_path):
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.save_util import load_from_zip_file

    model, opt = _stepped(torch.optim.Adam, 0)
    path = tmp_path / "sb3.zip"
    zipsave.save_archive(
        path, data={"gamma": 0.99}, params={"policy": model.state_dict(), "policy.optimizer": opt.state_dict()}
    )
    data, params, _variables = load_from_zip_file(path)
    assert data["gamma"] == 0.99
    assert_same(model.state_dict(), params["policy"])
    assert_same(opt.state_dict()["state"], params["policy.optimizer"]["state"])


def test_metadata_reader_describes_tensors_without_reading_them(tmp_path):
    saved = zoo()
    buf = io.BytesIO()
    torch.save(saved, buf)

    class View(io.BytesIO):
        size = len(buf.getvalue())

        def read_at(self, offset, out):
            data = self.getvalue()[offset : offset + len(memoryview(out).cast("B"))]
            memoryview(out).cast("B")[: len(data)] = data
            return len(data)

    meta = read_pth_meta(View(buf.getvalue()))
    assert isinstance(meta.tree["large"], TensorRef)
    assert meta.tree["large"].shape == (700, 1000) and str(meta.tree["large"].dtype) == "torch.float32"
    assert meta.tree["transposed"].stride == (1, 7)
    assert meta.tree["view_of_base"].storage.key == meta.tree["base"].storage.key
    assert meta.tree["view_of_base"].offset == 16


# -- mismatches ----------------------------------------------------------------------------
def test_shape_mismatch_names_member_and_key_and_changes_nothing(tmp_path):
    path = tmp_path / "m.zip"
    zipsave.save({"net": torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))}, path)
    target = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(
        zipsave.ParameterMismatchError, match=re.escape("`1.weight`: saved shape (2, 8), expected (3, 8)")
    ) as info:
        zipsave.restore({"net": target}, path)
    assert info.value.member == "net.pth" and info.value.key == "1.weight"
    assert "`1.bias`: saved shape (2,), expected (3,)" in str(info.value)
    assert_same(before, target.state_dict())  # checked before a byte was read


def test_dtype_mismatch_is_an_error_unless_exact_match_is_off(tmp_path):
    path = tmp_path / "m.zip"
    saved = torch.nn.Linear(4, 8)
    zipsave.save({"net": saved}, path)
    target = torch.nn.Linear(4, 8).double()
    with pytest.raises(
        zipsave.ParameterMismatchError, match=re.escape("saved dtype torch.float32, expected torch.float64")
    ) as info:
        zipsave.restore({"net": target}, path)
    assert info.value.member == "net.pth" and info.value.key == "weight"
    zipsave.restore({"net": target}, path, exact_match=False)
    assert target.weight.dtype == torch.float64
    assert torch.equal(target.weight, saved.weight.double())


def test_key_mismatch_is_refused_before_reading(tmp_path):
    path = tmp_path / "m.zip"
    zipsave.save({"net": torch.nn.Linear(4, 8)}, path)
    target = torch.nn.Sequential(torch.nn.Linear(4, 8))
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape("missing keys ['0.bias', '0.weight']")) as info:
        zipsave.restore({"net": target}, path)
    assert info.value.member == "net.pth"
    assert_same(before, target.state_dict())


def test_optimizer_of_another_model_is_refused(tmp_path):
    _model, opt = _stepped(torch.optim.Adam, 0)
    path = tmp_path / "o.zip"
    zipsave.save({"opt": opt}, path)
    other = torch.optim.Adam([torch.nn.Parameter(torch.zeros(3))])
    with pytest.raises(zipsave.ParameterMismatchError, match="parameter groups") as info:
        zipsave.restore({"opt": other}, path)
    assert info.value.member == "opt.pth"


# -- corruption ----------------------------------------------------------------------------
def _flip_byte_in(path, member, fraction=0.5):
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    pos = start + int(info.file_size * fraction)
    raw[pos] ^= 0x40
    path.write_bytes(bytes(raw))


def test_corrupt_record_is_an_error_or_skipped_when_asked(tmp_path, io_mode):
    path = tmp_path / "c.zip"
    zipsave.save({"holder": Holder(zoo()), "other": torch.nn.Linear(3, 3)}, path)
    _flip_byte_in(path, "holder.pth")
    with pytest.raises(zipsave.IntegrityError, match=re.escape("member `holder.pth`")):
        zipsave.load(path)
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("member `holder.pth`")):
        out = zipsave.load(path, skip_broken_tensors=True)
    assert "holder" not in out and "other" in out
    with pytest.raises(zipsave.IntegrityError, match="does not match the recorded") as info:
        zipsave.load(path, strict=True)
    assert info.value.member == "holder.pth"


def test_corrupt_record_in_place_says_the_target_was_touched(tmp_path, monkeypatch):
    monkeypatch.setattr(_torch_io, "_SMALL_MEMBER", 0)  # large-member path: checked while filling
    path = tmp_path / "c.zip"
    zipsave.save({"net": torch.nn.Linear(300, 300)}, path)
    _flip_byte_in(path, "net.pth")
    with pytest.raises(zipsave.IntegrityError, match="partly overwritten"):
        zipsave.restore({"net": torch.nn.Linear(300, 300)}, path, strict=True)
    with pytest.raises(zipsave.IntegrityError, match="partly overwritten"):
        zipsave.restore({"net": torch.nn.Linear(300, 300)}, path)
    with pytest.warns(zipsave.SkippedEntryWarning, match="partly overwritten"):
        zipsave.restore({"net": torch.nn.Linear(300, 300)}, path, skip_broken_tensors=True)


def test_small_corrupt_member_leaves_the_target_untouched(tmp_path):
    path = tmp_path / "c.zip"
    zipsave.save({"net": torch.nn.Linear(30, 30)}, path)
    _flip_byte_in(path, "net.pth", fraction=0.6)
    target = torch.nn.Linear(30, 30)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(zipsave.IntegrityError):
        zipsave.restore({"net": target}, path, strict=True)
    assert_same(before, target.state_dict())


def test_truncated_archive_is_a_clear_error(tmp_path):
    path = tmp_path / "t.zip"
    zipsave.save({"net": torch.nn.Linear(300, 300)}, path)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(zipsave.ArchiveFormatError):
        zipsave.load(path)


# -- the torch.load fallback -----------------------------------------------------------------
def _archive_with_member(path, name, raw):
    with open(path, "wb") as f:
        writer = ArchiveWriter(f)
        writer.write_bytes("data", b"{}")
        writer.write_bytes(name, raw)
        writer.write_manifest()
        writer.close()


def _repack(raw, replace):
    """Rewrite a torch zip with Python's zipfile (records no longer aligned), replacing some
    records' bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            for suffix, new in replace.items():
                if info.filename.endswith(suffix):
                    data = new
            dst.writestr(info.filename, data)
    return out.getvalue()


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")  # torch deprecates qint8
@pytest.mark.parametrize("mmap", [False, True])
def test_a_quantized_tensor_is_refused_naming_member_and_key(tmp_path, mmap):
    # Quantized, nested and meta tensors are not read (only dense and validated sparse ones).
    q = torch.quantize_per_tensor(torch.randn(6), scale=0.1, zero_point=3, dtype=torch.qint8)
    path = tmp_path / "q.zip"
    zipsave.save_archive(path, params={"q": {"q": q, "w": torch.arange(4.0)}})
    with pytest.raises(
        zipsave.ZipsaveError, match=re.escape("member `q.pth`: is corrupt or unreadable (`q` is a quantized tensor;")
    ):
        zipsave.load_archive(path)
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("`q` is a quantized tensor")):
        zipsave.load(path, mmap=mmap)


def test_big_endian_member_falls_back_to_torch_load(tmp_path):
    buf = io.BytesIO()
    torch.save({"w": torch.arange(6, dtype=torch.int32)}, buf)
    raw = _repack(buf.getvalue(), {"/byteorder": b"big"})
    with pytest.raises(_torch_io.Unsupported, match="big-endian"):
        read_pth_meta(_torch_io.BufferView(bytearray(raw)))
    path = tmp_path / "be.zip"
    _archive_with_member(path, "x.pth", raw)
    params = zipsave.load_archive(path)[1]
    assert torch.equal(params["x"]["w"].cpu(), torch.load(io.BytesIO(raw), weights_only=True)["w"])
    assert params["x"]["w"][1] == 1 << 24  # the bytes were swapped, as torch.load does


@pytest.mark.parametrize("mmap", [False, True])
def test_unaligned_member_from_another_tool_loads(tmp_path, mmap):
    saved = zoo()
    buf = io.BytesIO()
    torch.save(saved, buf)
    path = tmp_path / "u.zip"
    _archive_with_member(path, "x.pth", _repack(buf.getvalue(), {}))
    assert_same(saved, zipsave.load(path, mmap=mmap)["x"])


def test_unknown_global_falls_back_and_stays_safe(tmp_path):
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2), "when": np.float64(1.5)}, buf)
    path = tmp_path / "g.zip"
    _archive_with_member(path, "x.pth", buf.getvalue())
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("member `x.pth`")):
        zipsave.load_archive(path)  # weights_only=True refused the foreign global: never a silent gap
    with pytest.warns(zipsave.SkippedEntryWarning, match=re.escape("member `x.pth`")):
        params = zipsave.load_archive(path, skip_broken_tensors=True)[1]
    assert "x" not in params


# -- writer hashing ------------------------------------------------------------------------
def _manifest(path):
    import json

    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read("manifest.json"))["members"]


@pytest.mark.parametrize("sha256", [False, True])
def test_manifest_hashes(tmp_path, sha256):
    import hashlib
    import zlib

    path = tmp_path / "h.zip"
    zipsave.save({"net": torch.nn.Linear(400, 400), "lr": 0.1}, path, sha256=sha256)
    members = _manifest(path)
    with zipfile.ZipFile(path) as zf:
        for name, entry in members.items():
            data = zf.read(name)
            assert entry["size"] == len(data)
            assert entry["crc32"] == f"{zlib.crc32(data):08x}"
            if name.endswith(".pth") and not sha256:
                assert entry["sha256"] is None
            else:
                assert entry["sha256"] == hashlib.sha256(data).hexdigest()


def test_streamed_member_to_a_non_seekable_output(tmp_path, monkeypatch):
    monkeypatch.setattr(_crc, "PARALLEL_MIN", 1024)

    class Pipe(io.RawIOBase):
        def __init__(self):
            self.chunks = []

        def writable(self):
            return True

        def write(self, b):
            self.chunks.append(bytes(b))
            return len(b)

    pipe = Pipe()
    net = torch.nn.Linear(100, 100)
    zipsave.save({"net": net}, pipe)
    path = tmp_path / "p.zip"
    path.write_bytes(b"".join(pipe.chunks))
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
    assert_same(net.state_dict(), zipsave.load(path)["net"])


def test_plain_values_torch_load_builds_load_alike(tmp_path):
    # torch's weights-only vocabulary beyond tensors (bytes via _codecs.encode, sets, complex,
    # bytearray, Counter, torch.Size, devices), read by zipsave's own reader as torch reads it.
    import collections

    value = {
        "w": torch.arange(3.0),
        "b": b"\x00\xff",
        "s": {1, 2, 3},
        "c": 1 + 2j,
        "ba": bytearray(b"z"),
        "n": collections.Counter({"a": 2}),
        "size": torch.Size([2, 3]),
        "dev": torch.device("cpu"),
        "t": torch.nn.Parameter(torch.ones(2)),
        "sparse": torch.eye(2).to_sparse(),
    }
    buf = io.BytesIO()
    torch.save(value, buf)
    path = tmp_path / "plain.zip"
    _archive_with_member(path, "x.pth", buf.getvalue())
    got = zipsave.load_archive(path)[1]["x"]
    want = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    assert {k: v for k, v in got.items() if not isinstance(v, torch.Tensor)} == {
        k: v for k, v in want.items() if not isinstance(v, torch.Tensor)
    }
    assert torch.equal(got["w"], want["w"]) and isinstance(got["t"], torch.nn.Parameter)
    assert torch.equal(got["sparse"].to_dense(), want["sparse"].to_dense())


@pytest.mark.parametrize("ctor", ["FloatTensor", "Tensor", "LongTensor"])
def test_a_tensor_torch_would_allocate_unfilled_is_refused(tmp_path, ctor):
    # torch.load(weights_only=True) calls `torch.FloatTensor(4096)`: memory it never fills
    raw = b"\x80\x02}X\x01\x00\x00\x00wctorch\n" + ctor.encode() + b"\nM\x00\x10\x85R\x73."
    assert torch.load(io.BytesIO(_torch_zip_of(raw)), weights_only=True)["w"].numel() == 4096
    path = tmp_path / "ctor.zip"
    _archive_with_member(path, "x.pth", _torch_zip_of(raw))
    with pytest.raises(
        zipsave.ZipsaveError,
        match=re.escape(f"`w` is `torch.{ctor}(...)`, a tensor torch allocates without filling it from the file"),
    ):
        zipsave.load_archive(path)


def _torch_zip_of(data_pkl: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("archive/data.pkl", data_pkl)
        zf.writestr("archive/byteorder", "little")
        zf.writestr("archive/version", "3\n")
    return out.getvalue()


def test_a_tensor_whose_size_one_dimension_has_stride_zero_saves_and_loads(tmp_path):
    """``torch.tensor(5).expand(1)`` has stride 0: torch calls it contiguous but will not view it
    as bytes. Saving it (in ``data`` and in a state dict) raised a RuntimeError."""
    expanded = torch.tensor(7.0).expand(1)
    assert expanded.stride() == (0,) and expanded.is_contiguous()
    module = torch.nn.Module()
    module.register_buffer("b", torch.tensor(3).expand(1))
    zipsave.save({"t": expanded, "m": module}, tmp_path / "s.zip")
    loaded = zipsave.load(tmp_path / "s.zip")
    assert torch.equal(loaded["t"], torch.tensor([7.0]))
    assert torch.equal(loaded["m"]["b"], torch.tensor([3]))
