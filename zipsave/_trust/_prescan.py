"""A pickle's shape checked before another unpickler reads it (torch's ``weights_only``
loader, DCP's metadata reader), so that what those build stays linear in the pickle's size:
no hash-flooded set or dict, no huge integer, no length that claims more bytes than the
pickle holds (C's unpickler preallocates it). The scan is a :class:`~._bounded.BoundedUnpickler`
whose globals, calls and persistent references are inert stand-ins."""

from __future__ import annotations

import pickle
import zipfile
from typing import Any

from .. import _trust  # on first use: the torch calls of a legacy pickle (`_torch_calls`)
from .._bounds import check_memo, check_zip_infos
from ..exceptions import ArchiveLimitError, DecodeError, ZipsaveError
from ._bounded import BoundedUnpickler

__all__ = ["check_legacy_torch", "check_torch_zip", "prescan_pickle"]


class _Stub:
    """What every global, call and persistent reference becomes in a pre-scan: an inert
    object that hashes by identity and accepts any state."""

    def __call__(self, *args: Any, **kwargs: Any) -> _Stub:
        return _Stub()

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def add(self, item: Any) -> None:
        pass


class _Named(_Stub):
    def __init__(self, name: str) -> None:
        self.name = name


class _Prescan(BoundedUnpickler):
    dispatch = dict(BoundedUnpickler.dispatch)

    def __init__(
        self, payload: bytes, records: dict[str, int] | None = None, *, limits: Any = None, **where: Any
    ) -> None:
        super().__init__(payload, limits=limits, **where)
        self.pids: list[Any] = []
        self.records = records

    def find_class(self, module: str, name: str) -> Any:
        return _Named(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        self.pids.append(pid)
        return _trust.storage_reference(pid, self.records, **self.where) or _Stub()

    def load_newobj(self) -> None:
        _trust.check_torch_call(self.stack[-2], self.stack.pop(), self.budget, **self.where)
        self.stack[-1] = _Stub()

    dispatch[pickle.NEWOBJ[0]] = load_newobj

    def load_newobj_ex(self) -> None:
        del self.stack[-2:]
        self.stack[-1] = _Stub()

    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex

    def load_reduce(self) -> None:
        args = self.stack.pop()
        if type(args) is tuple:
            for arg in args:
                if type(arg) in (list, tuple, set, frozenset) and len(arg) > 1:
                    self.keys.items_of(arg)
        _trust.check_torch_call(self.stack[-1], args, self.budget, **self.where)
        self.stack[-1] = _Stub()

    dispatch[pickle.REDUCE[0]] = load_reduce

    def load_build(self) -> None:
        self.stack.pop()

    dispatch[pickle.BUILD[0]] = load_build

    def _instantiate(self, klass: Any, args: Any) -> None:
        self.append(_Stub())

    def get_extension(self, code: int) -> None:
        self.append(_Stub())


def prescan_pickle(payload: bytes, records: dict[str, int] | None = None, *, limits: Any = None, **where: Any) -> None:
    """Read ``payload`` once with every global and call made inert, refusing what would make
    a real unpickler take time or memory beyond the pickle's size (hash floods, huge integers,
    lengths past the end) and what torch's loader would allocate past the file's bytes: a
    tensor reaching past its storage, whose size is its record's in ``records`` (storage key
    -> bytes; a reference claiming more than its record is refused), and storages, tensors or
    bytearrays constructed from a size, charged to ``limits``' allocation budget (a
    :class:`~zipsave.Limits`; the defaults when ``None``). Raises :class:`ArchiveLimitError`
    or :class:`DecodeError`."""
    try:
        scan = _Prescan(bytes(payload), records, limits=limits, **where)
        scan.load()
        check_memo(scan.memo, len(payload), **where)
    except ZipsaveError:
        raise
    except RecursionError:
        raise DecodeError("the pickle nests too deeply to read.", **where) from None
    except Exception as err:
        raise DecodeError(f"the pickle is malformed ({type(err).__name__}: {err}).", **where) from err


def check_legacy_torch(payload: bytes | bytearray, **where: Any) -> None:
    """Check a legacy (pre-zip) ``torch.save`` stream, as torch pickles a storage: five pickles
    (magic, protocol, system info, the object, the storage keys), then for each key an element
    count and the elements. torch allocates each count before reading: every count must fit in
    the bytes that follow."""
    try:
        scan = _Prescan(bytes(payload), **where)
        for _ in range(4):
            scan.load()
        keys = scan.load()
        itemsize: dict[Any, int] = {}
        for pid in scan.pids:
            kind = getattr(pid[1], "name", "") if type(pid) is tuple and len(pid) > 2 else ""
            size = (
                _trust.LEGACY_ITEMSIZE.get(kind.rpartition(".")[2].removesuffix("Storage"))
                if kind.startswith("torch.")
                else None
            )
            if size is None:
                raise DecodeError(f"a legacy torch storage reference names {kind or pid!r}.", **where)
            itemsize[pid[2]] = size
        pos = scan._file_read.__self__.tell()
        for key in keys if type(keys) is list else ():
            count = int.from_bytes(payload[pos : pos + 8], "little", signed=True)
            end = pos + 8 + count * itemsize.get(key, 16)
            if key not in itemsize or count < 0 or end > len(payload):
                raise ArchiveLimitError(
                    f"a legacy torch storage `{key}` claims {count} elements; {len(payload) - pos - 8} bytes follow.",
                    **where,
                )
            pos = end
    except ZipsaveError:
        raise
    except Exception as err:
        raise DecodeError(f"is not a readable torch storage ({type(err).__name__}: {err}).", **where) from err


def check_torch_zip(fileobj: Any, *, size: int, max_bytes: int, max_ratio: float, **where: Any) -> None:
    """Check a ``torch.save`` zip before ``torch.load`` reads it: its members within the limits
    (no deflate bomb), and its ``data.pkl`` through :func:`prescan_pickle`. ``fileobj`` is
    rewound afterwards."""
    start = fileobj.tell() if hasattr(fileobj, "tell") else 0
    try:
        with zipfile.ZipFile(fileobj) as inner:
            infos = inner.infolist()
            check_zip_infos(infos, size=size, max_bytes=max_bytes, max_ratio=max_ratio, **where)
            pickles = [i for i in infos if i.filename == "data.pkl" or i.filename.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise DecodeError("is not a torch.save file (no single data.pkl).", **where)
            with inner.open(pickles[0]) as member:
                member._expected_crc = None  # type: ignore[attr-defined]  # torch may write none; the outer CRC covers it
                payload = member.read()
            data = pickles[0].filename[: -len("data.pkl")] + "data/"
            records = {i.filename[len(data) :]: i.file_size for i in infos if i.filename.startswith(data)}
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, OverflowError) as err:
        if isinstance(err, ZipsaveError):
            raise
        raise DecodeError(
            f"is not a torch.save zip ({type(err).__name__}: {err}); zipsave reads only torch's zip format.", **where
        ) from err
    finally:
        if hasattr(fileobj, "seek"):
            fileobj.seek(start)
    if len(payload) > max_bytes:
        raise ArchiveLimitError(f"data.pkl holds {len(payload)} bytes; the limit is {max_bytes}.", **where)
    prescan_pickle(payload, records, **where)
