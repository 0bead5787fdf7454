"""Encoding and writing: parts -> encoded members (validated before a byte is written) -> one
archive at its destination."""

from __future__ import annotations

import base64
import contextlib
import errno
import functools
import os
import warnings
from typing import Any, Iterable, Iterator

import numpy as np
import torch

# _archive, _sign: the progress bar and signing, when asked for; _core: the glob rules of a
# component's patterns and the pickle audit, on first use
from .. import _archive, _core, _format, _system_info  # _core: the sign extra (`sign=`), on first use
from .._archive import ArchiveWriter, is_url, open_output, with_suffix
from .._codec import NATIVE_KEY, SERIALIZED_KEY, TYPE_KEY, Encoder, refuse_nested
from .._json_write import dump_json
from .._tensors import check_weights_only, save_pth
from .._version import __version__
from ..exceptions import EncodeError, StorageError, ZipsaveError, ZipsaveWarning, caller_stacklevel, describe_path
from ._collect import collect, holds_state
from ._names import check_names, check_text
from ._parts import Parts, is_live_handle, is_stateful

__all__ = ["Encoded", "encode", "encoded_size", "write"]


class Encoded:
    """An object encoded and ready to write; tensors are still references (no copies).
    ``snapshot`` is ``Parts.snapshot``: how a background save may copy ``arrays``. (A plain
    class: a first save does not compile a dataclass's methods.) ``app_state`` and
    ``state_values`` are ``Parts``'s."""

    __slots__ = (
        "folder",
        "data",
        "init",
        "state",
        "variables",
        "arrays",
        "components",
        "snapshot",
        "app_state",
        "state_values",
    )

    def __init__(
        self,
        folder: str,
        data: bytes,
        init: bytes | None,
        state: list[tuple[str, Any]],
        variables: dict[str, torch.Tensor] | None,
        arrays: list[tuple[str, np.ndarray]],
        components: list[Encoded],
        snapshot: Any = None,
        app_state: bool = False,
        state_values: dict[str, int] | None = None,
    ) -> None:
        self.folder = folder
        self.data = data
        self.init = init
        self.state = state
        self.variables = variables
        self.arrays = arrays
        self.components = components
        self.snapshot = snapshot
        self.app_state = app_state
        self.state_values = {} if state_values is None else state_values

    def replace(self, **changes: Any) -> Encoded:
        """A copy with ``changes`` (``dataclasses.replace``)."""
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return Encoded(**fields)

    def __repr__(self) -> str:
        return f"Encoded(folder={self.folder!r}, {len(self.data)} bytes of data, {len(self.components)} components)"


def encode(parts: Parts, folder: str, *, exclude: Iterable[str] | None, include: Iterable[str] | None) -> Encoded:
    check_names(parts.state, parts.components, folder)
    arrays: list[tuple[str, np.ndarray]] = []

    def add_array(arr: np.ndarray) -> str:
        name = _format.join(folder, f"{_format.ARRAYS_DIR}{len(arrays)}{_format.NPY_SUFFIX}")
        arrays.append((name, arr))
        return name

    for key, value in (parts.variables or {}).items():
        refuse_nested(value, key)  # torch.save would write it, and no safe load reads it back
    encoder = Encoder(add_array=add_array, **parts.encoder_options)
    data = {key: encoder.encode_entry(key, value) for key, value in parts.data.items()}
    _warn_code_by_value(data, parts.rebuilt_on_load)
    init = None
    if parts.init is not None:
        component_of = {id(comp): name for name, comp in parts.components}
        member = _format.join(folder, _format.INIT)

        def encode_arg(key: str, value: Any) -> Any:
            if is_live_handle(value) or _kept_elsewhere(value):
                return None
            if id(value) in component_of:
                # A component passed to the constructor: built from its folder first on load.
                return {TYPE_KEY: str(type(value)), NATIVE_KEY: {"kind": "component", "path": component_of[id(value)]}}
            try:
                return encoder.encode_entry(key, value)
            except EncodeError as err:
                raise EncodeError(
                    f"constructor argument `{key}` cannot be saved ({err.detail}).",
                    member=member,
                    hint=(
                        "Values passed through `*args` cannot be given again on load: make them a keyword argument."
                        if key.startswith("*")
                        else "Pass it again when loading, e.g. `Algo.load(path, " + f"{key}=...)`."
                    ),
                ) from err

        # A module or optimizer passed in is saved by its state dict where the object keeps it;
        # pickled here it would be a second copy no safe load could read. Left out, the
        # constructor's default (a `default_factory`, `net or Net()`) builds the one loaded into.
        args = {key: encode_arg(key, value) for key, value in parts.init["args"].items() if not _kept_elsewhere(value)}
        record = {"class": parts.init["class"], "args": args}
        if parts.init.get("positional"):
            record["positional"] = [[key, encode_arg(key, value)] for key, value in parts.init["positional"]]
        if parts.init.get("handler"):
            record["handler"] = parts.init["handler"]
        if parts.init.get("modes"):
            record["modes"] = parts.init["modes"]
        init = dump_json(record)
    state = []
    for name, provider in parts.state:
        try:
            state.append((name, provider.state_dict() if is_stateful(provider) else provider))
        except Exception as err:
            raise EncodeError(
                f"`{name}.state_dict()` failed ({type(err).__name__}: {err}); nothing was written.",
                key=name,
                hint=f"Fix the object, or leave it out with `exclude=[{name!r}]`.",
            ) from err
        if is_stateful(provider) and not isinstance(provider, torch.optim.Optimizer):
            check_weights_only(name, state[-1][1])  # a module's too: a lazy one's parameters, its extra state
    components = []
    for name, comp in parts.components:
        sub = _format.join(folder, name)
        collected = collect(comp, _core.nested(exclude, name), _core.nested(include, name))
        components.append(encode(collected, sub, exclude=None, include=None))
    data_bytes = _dump_entries(data, folder)
    return Encoded(
        folder,
        data_bytes,
        init,
        state,
        parts.variables,
        arrays,
        components,
        parts.snapshot,
        parts.app_state,
        parts.state_values,
    )


def _warn_code_by_value(data: dict[str, Any], rebuilt_on_load: Any) -> None:
    """Say at save time what a safe load will skip: values cloudpickle stored as code (a lambda,
    a function or class defined inside a function or in ``__main__``), with the fix; one warning
    per save. Read off the pickles' globals; nothing is unpickled."""
    keys = [
        key
        for key, entry in data.items()
        if any(_stored_as_code(found) for found in _pickled(entry))
        and not (rebuilt_on_load is not None and rebuilt_on_load(key, entry))
    ]
    if keys:
        listed = ", ".join(f"`{key}`" for key in keys)
        warnings.warn(
            ZipsaveWarning(
                f"{listed} {'holds' if len(keys) == 1 else 'hold'} code that cloudpickle stores by value (a lambda, "
                "or a function or class defined inside a function or in `__main__`): a safe load (the default) runs "
                f"no code from an archive, so it will skip {'it' if len(keys) == 1 else 'them'}. Define it at module "
                "level in an importable module (it is then saved by its import path), or pass it again when loading: "
                "`custom_objects={" + ", ".join(f"{key!r}: ..." for key in keys) + "}`."
            ),
            stacklevel=caller_stacklevel(),
        )


def _pickled(entry: Any, depth: int = 0) -> Iterable[str]:
    """The pickles an encoded entry holds: its own (when it has no native form), or those of the
    items inside a native container (a tuple holding one lambda)."""
    if depth > 20:
        return
    if isinstance(entry, dict):
        if isinstance(entry.get(SERIALIZED_KEY), str) and NATIVE_KEY not in entry:
            yield entry[SERIALIZED_KEY]
            return
        for value in entry.values():
            yield from _pickled(value, depth + 1)
    elif isinstance(entry, list):
        for value in entry:
            yield from _pickled(value, depth + 1)


def _stored_as_code(serialized: str) -> bool:
    """Whether a pickle holds code cloudpickle stored by value (it then names cloudpickle)."""
    try:
        return any(name.startswith("cloudpickle.") for name in _core.pickle_globals(base64.b64decode(serialized)))
    except Exception:  # noqa: BLE001 - not a readable pickle: the load says what it is
        return False


def _kept_elsewhere(value: Any) -> bool:
    """A constructor argument whose state the archive holds as members: a module, an optimizer,
    another stateful object or a plain object holding them."""
    return not is_live_handle(value) and (is_stateful(value) or holds_state(value))


def _dump_entries(data: dict[str, Any], folder: str) -> bytes:
    """``dump_json(data)``; a value nested past orjson's limit (255 levels, counting the tags
    zipsave adds) is an ``EncodeError`` naming its key, not orjson's bare ``TypeError``."""
    try:
        return dump_json(data)
    except TypeError:
        for key, value in data.items():
            check_text(key, member=_format.join(folder, _format.DATA))
            try:
                dump_json(value)
            except TypeError as err:
                if "UTF-8" in str(err):
                    raise EncodeError(
                        "holds a string (or a key) that is not valid UTF-8: a lone surrogate, which `os.fsdecode` "
                        "and `errors='surrogateescape'` make of undecodable bytes, and `data` is UTF-8 JSON; "
                        "nothing was written.",
                        member=_format.join(folder, _format.DATA),
                        key=key,
                        hint="Decode the bytes it came from with their encoding (or `errors='replace'`), or keep "
                        "them as `bytes`.",
                    ) from err
                raise EncodeError(
                    f"is nested too deeply to write as JSON ({err}; at most about 250 levels, fewer for "
                    "tuples, sets and other tagged values); nothing was written.",
                    member=_format.join(folder, _format.DATA),
                    key=key,
                    hint=f"Flatten it, or leave it out with `exclude=[{key!r}]`.",
                ) from err
        raise


def write_encoded(writer: ArchiveWriter, enc: Encoded, *, root: bool) -> None:
    join = _format.join
    writer.write_bytes(join(enc.folder, _format.DATA), enc.data)
    if enc.init is not None:
        writer.write_bytes(join(enc.folder, _format.INIT), enc.init)
    if enc.variables is not None or root:
        with writer.open_member(join(enc.folder, _format.PYTORCH_VARIABLES)) as f:
            save_pth(f, enc.variables or {})
    for name, sd in enc.state:
        with writer.open_member(join(enc.folder, _format.state_dict_member(name))) as f:
            save_pth(f, sd)
    for name, arr in enc.arrays:
        with writer.open_member(name) as f:
            write_npy(f, arr)
    for comp in enc.components:
        write_encoded(writer, comp, root=False)
    if root:
        writer.write_bytes(_format.VERSION, f"zipsave {__version__}\nformat {_format.FORMAT_VERSION}\n".encode())
        writer.write_bytes(_format.SYSTEM_INFO, _system_info_text(_system_info.get_system_info))
        writer.write_manifest(
            app_state=[e.folder for e in _folders(enc) if e.app_state],
            state_dict_values={
                _format.join(e.folder, _format.state_dict_member(name)): place
                for e in _folders(enc)
                for name, place in e.state_values.items()
            },
        )


def _folders(enc: Encoded) -> Iterator[Encoded]:
    """``enc`` and its components, depth first."""
    yield enc
    for comp in enc.components:
        yield from _folders(comp)


def write_npy(f: Any, arr: np.ndarray) -> None:
    """``arr`` as a ``.npy`` file, its data written straight from the array's memory in one
    call (``np.lib.format.write_array`` copies it through ``tobytes`` in 16 MiB chunks); the
    bytes are the same as ``write_array``'s."""
    arr = np.asarray(arr, order="C")  # not ascontiguousarray: it makes 0-d arrays 1-d
    fmt = np.lib.format
    header = fmt.header_data_from_array_1_0(arr)
    if arr.dtype.hasobject or not (arr.flags.c_contiguous and arr.nbytes):
        fmt.write_array(f, arr, allow_pickle=False)
        return
    try:
        fmt.write_array_header_1_0(f, header)
    except ValueError:  # a header over 64 KiB (a large structured dtype): version 2.0 or 3.0
        fmt.write_array(f, arr, allow_pickle=False)
        return
    f.write(arr.reshape(-1).view(np.uint8).data)


@functools.lru_cache(maxsize=4)
def _system_info_text(get_info: Any) -> bytes:
    """``system_info.txt``, collected once per process: versions do not change while it runs,
    and reading five packages' metadata costs ~8 ms, more than saving a small model."""
    return _system_info.format_system_info(get_info()).encode()


def write(
    enc: Encoded,
    path: Any,
    *,
    storage_options: dict | None = None,
    progress: bool = False,
    sha256: bool = False,
    durable: bool = True,
    sign: Any = None,
) -> None:
    """Write ``enc`` as one archive at ``path`` (atomically for paths and URLs; a local path
    is on disk before this returns unless ``durable`` is false), signed by ``sign`` (a
    :class:`~zipsave.Signer`) when given: its ``zipsave.sig`` member is written last, or its
    detached ``ARCHIVE.sig`` once the archive is in place."""
    if sign is not None:
        check_signable(path, sign)
    total = encoded_size(enc) if progress else None
    writer: ArchiveWriter | None = None
    try:
        with open_output(path, storage_options=storage_options, progress=progress, durable=durable) as fp:
            counted = (
                _archive.counting_writer(fp, progress, total=total, desc=f"zipsave save {describe_path(path)}")
                if progress
                else contextlib.nullcontext(fp)
            )
            with counted as out:
                embed = sign is not None and sign.embed
                writer = ArchiveWriter(out, sha256=True if sha256 or embed else None)
                try:
                    write_encoded(writer, enc, root=True)
                    if embed:
                        name = os.path.basename(with_suffix(describe_path(path)))
                        writer.write_bytes(_format.SIGNATURE, _core.embedded_signature(writer.members, sign, name))
                    writer.close()
                except BaseException:
                    writer.abort()
                    raise
    except ZipsaveError:
        raise
    except Exception as err:
        cause = storage_cause(err)
        if cause is None:
            raise
        member = writer.current if writer is not None else None
        raise StorageError(
            f"could not be written ({type(cause).__name__}: {cause}); the previous archive, if any, is unchanged.",
            archive=path,
            member=member,
            errno=cause.errno,
            hint=None if cause.errno is None else _STORAGE_HINTS.get(cause.errno),
        ) from err
    if sign is not None and not sign.embed:
        _core.sign_detached(with_suffix(os.fspath(path).removeprefix("file://")), sign)


def check_signable(path: Any, sign: Any) -> None:
    """Refuse, before writing, a detached signature where there is no local file to put it beside."""
    if not sign.embed and (hasattr(path, "write") or is_url(path)):
        raise ValueError(
            "a detached signature (Signer(embed=False)) is written beside a local archive; this save goes to "
            f"{'a file object' if hasattr(path, 'write') else 'a URL'}: use Signer(embed=True)."
        )


#: What to do about the storage faults a user meets, in their words.
_STORAGE_HINTS = {
    errno.ENOSPC: "The disk is full: free space on it, or save elsewhere.",
    errno.EDQUOT: "The disk quota is used up: free space in it, or save elsewhere.",
    errno.EROFS: "The file system is read-only: save elsewhere.",
}


def storage_cause(err: BaseException) -> OSError | None:
    """The OS error behind a failed write, also when a library (torch's zip writer) reported it
    as its own error: the first ``OSError`` in the chain of causes."""
    seen: set[int] = set()
    node: BaseException | None = err
    while node is not None and id(node) not in seen:
        if isinstance(node, OSError):
            return node
        seen.add(id(node))
        node = node.__cause__ or node.__context__
    return None


def encoded_size(enc: Any) -> int:
    """About how many bytes an encoded object will take in the archive (the bar's total)."""
    seen: set[int] = set()

    def tree(value: Any) -> int:
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            if storage._cdata in seen:
                return 0
            seen.add(storage._cdata)
            return storage.nbytes()
        if isinstance(value, dict):
            return sum(tree(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return sum(tree(v) for v in value)
        return 0

    total = len(enc.data) + len(enc.init or b"")
    total += sum(tree(sd) for _, sd in enc.state) + tree(enc.variables or {})
    total += sum(arr.nbytes for _, arr in enc.arrays)
    return total + sum(encoded_size(comp) for comp in enc.components)
