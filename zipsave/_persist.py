"""save / load / restore / save_archive / load_archive: models and app-state dicts <-> archives.

Saving collects an object's parts (``data`` values, state dicts, loose tensors, nested
``Saveable`` components), validates and encodes them all, and only then writes the archive
to a temporary file that atomically replaces the target. Loading reads each part under the
skip rules: a broken entry is reported and skipped, the rest loads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import html
import io
import logging
import os
import socket
import threading
import types
import warnings
from typing import IO, Any, Iterable, Iterator

import numpy as np
import torch

from . import _format, _progress, _system_info
from ._archive import DEFAULT_LIMITS, ArchiveReader, ArchiveWriter, Limits, atomic_output, open_input
from ._codec import Decoder, Encoder, dump_json, parse_json
from ._npy import read_npy
from ._torch_io import get_device, load_pth, save_pth
from ._unpickle import TrustPolicy
from ._version import __version__
from .exceptions import (
    ArchiveFormatError,
    DecodeError,
    EncodeError,
    IntegrityError,
    ParameterMismatchError,
    UnsafeGlobalError,
    ZipsaveError,
    ZipsaveWarning,
)

__all__ = [
    "LoadReport",
    "SkippedEntry",
    "SkippedEntryWarning",
    "load",
    "load_archive",
    "restore",
    "save",
    "save_archive",
]


# -- reports -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SkippedEntry:
    """One entry that could not be loaded and was skipped.

    Attributes
    ----------
    member
        The archive member (``"data"``, ``"policy.pth"``, ...).
    key
        The ``data`` key, or ``None`` for a whole member.
    type_hint
        The saved ``":type:"`` hint, when there is one.
    cause
        Why it failed, in words.
    """

    member: str
    key: str | None
    type_hint: str | None
    cause: str

    def __str__(self) -> str:
        what = f"key `{self.key}` of member `{self.member}`" if self.key is not None else f"member `{self.member}`"
        hint = f" (type {self.type_hint})" if self.type_hint else ""
        return f"{what}{hint}: {self.cause}"


class SkippedEntryWarning(ZipsaveWarning):
    """Warns that one entry was skipped; ``.entry`` holds the :class:`SkippedEntry`."""

    def __init__(self, entry: SkippedEntry, archive: str | None) -> None:
        self.entry = entry
        self.archive = archive
        where = f"archive `{archive}`, " if archive else ""
        super().__init__(f"{where}skipped {entry}")


@dataclasses.dataclass
class LoadReport:
    """What a load skipped or found suspicious. Pass one as ``report=`` to collect it;
    a loaded :class:`~zipsave.Saveable` also keeps it as ``model.zipsave_report``."""

    archive: str | None = None
    skipped: list[SkippedEntry] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.skipped

    def __str__(self) -> str:
        if not self.skipped and not self.notes:
            return f"LoadReport({self.archive!r}): everything loaded"
        lines = [f"LoadReport({self.archive!r}): {len(self.skipped)} skipped"]
        lines += [f"  - skipped {entry}" for entry in self.skipped]
        lines += [f"  - note: {note}" for note in self.notes]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's text display
        printer.text(str(self))

    def _repr_html_(self) -> str:
        cell = "<td style='text-align:left'>{}</td>"
        rows = "".join(
            "<tr>" + "".join(cell.format(html.escape(v)) for v in (e.member, e.key or "", e.type_hint or "", e.cause))
            + "</tr>"
            for e in self.skipped
        )
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        status = f"{len(self.skipped)} skipped" if self.skipped else "everything loaded"
        head = html.escape(f"{self.archive}: {status}")
        header = "".join(f"<th style='text-align:left'>{h}</th>" for h in ("member", "key", "type", "cause"))
        table = f"<table><tr>{header}</tr>{rows}</table>" if rows else ""
        return f"<div><b>{head}</b>{table}{f'<ul>{notes}</ul>' if notes else ''}</div>"


# -- what is saved -------------------------------------------------------------------------
_ALWAYS_EXCLUDED_PREFIXES = ("_zipsave", "zipsave_")


def _is_live_handle(value: Any) -> bool:
    """Environments, loggers, files, locks, threads: state that cannot be meaningfully saved."""
    if isinstance(value, (logging.Logger, io.IOBase, types.ModuleType, types.GeneratorType, socket.socket, threading.Thread)):
        return True
    if type(value).__name__ in ("lock", "RLock", "_thread.lock", "Condition", "Event", "SummaryWriter"):
        return True
    try:
        import gymnasium

        if isinstance(value, (gymnasium.Env, gymnasium.vector.VectorEnv)):
            return True
    except ImportError:  # pragma: no cover - gymnasium is a dependency
        pass
    # SB3's VecEnv and its wrappers, without importing SB3.
    return callable(getattr(value, "step_async", None)) and callable(getattr(value, "step_wait", None))


def _is_stateful(value: Any) -> bool:
    return (
        not isinstance(value, type)
        and callable(getattr(value, "state_dict", None))
        and callable(getattr(value, "load_state_dict", None))
    )


def _recursive_getattr(obj: Any, path: str) -> Any:
    """``a.b.0.c``: attributes, and indexes into lists/dicts holding stateful objects."""
    for part in path.split("."):
        if isinstance(obj, (list, tuple)) and part.isdigit():
            obj = obj[int(part)]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            obj = getattr(obj, part)
    return obj


def _recursive_setattr(obj: Any, path: str, value: Any) -> None:
    head, _, last = path.rpartition(".")
    setattr(_recursive_getattr(obj, head) if head else obj, last, value)


def _unwrap(module: Any) -> Any:
    return getattr(module, "_orig_mod", module)  # torch.compile'd modules save un-prefixed


@dataclasses.dataclass
class _Parts:
    data: dict[str, Any]
    state: list[tuple[str, Any]]  # (name, object with state_dict or a ready state dict)
    variables: dict[str, torch.Tensor] | None
    components: list[tuple[str, Any]]
    init: dict[str, Any] | None = None
    encoder_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # keyword arguments of Encoder


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _collect(obj: Any, exclude: Iterable[str] | None, include: Iterable[str] | None) -> _Parts:
    """Split an object into the parts the archive stores."""
    exclude = set(exclude or ())
    include = set(include or ())
    from .saveable import Saveable

    if isinstance(obj, _Parts):
        return obj  # a component collected by its owner (SB3's replay buffer, VecNormalize)
    if isinstance(obj, dict):
        return _collect_app_state(obj, exclude, include)
    if not isinstance(obj, Saveable) and hasattr(obj, "_get_torch_save_params") and hasattr(obj, "_excluded_save_params"):
        return _collect_sb3(obj, exclude, include)
    if not hasattr(obj, "__dict__"):
        raise EncodeError(
            f"cannot save an object of type {type(obj).__name__}: expected a Saveable, an object with "
            "attributes, or a dict of stateful objects and values."
        )
    excluded = set(getattr(obj, "_excluded_save_params", lambda: ())()) | exclude
    excluded -= include
    data: dict[str, Any] = {}
    state: list[tuple[str, Any]] = []
    variables: dict[str, torch.Tensor] = {}
    components: list[tuple[str, Any]] = []
    seen: dict[int, str] = {}
    covered: set[int] = set()  # sub-modules and parameters already inside a saved state dict

    attrs = vars(obj)
    hooks = getattr(obj, "_get_torch_save_params", None)
    if callable(hooks):
        # SB3's hook names what is torch-saved; discovery then only looks for components.
        state_names, var_names = hooks()
        for name in list(state_names) + list(var_names):
            excluded.add(name.split(".")[0])
        state.extend((name, _unwrap(_recursive_getattr(obj, name))) for name in state_names)
        variables.update((name, _recursive_getattr(obj, name)) for name in var_names)
    for name, value in attrs.items():
        if name.startswith(_ALWAYS_EXCLUDED_PREFIXES) or name in excluded:
            continue
        if isinstance(value, torch.nn.Module):
            module = _unwrap(value)
            for sub in module.modules():
                covered.add(id(sub))
            for tensor in list(module.parameters()) + list(module.buffers()):
                covered.add(id(tensor))
    for name, value in attrs.items():
        if name.startswith(_ALWAYS_EXCLUDED_PREFIXES) or name in excluded:
            continue
        if isinstance(value, Saveable):
            components.append((name, value))
        elif isinstance(value, dict) and value and all(isinstance(v, Saveable) for v in value.values()):
            for key, comp in value.items():
                if not (isinstance(key, str) and key and "/" not in key):
                    raise EncodeError(
                        f"the dict of components `{name}` has the key {key!r}; component keys must be "
                        "non-empty strings without `/` (they become folder names).",
                        key=name,
                    )
                components.append((f"{name}/{key}", comp))
        elif isinstance(value, torch.nn.Module):
            module = _unwrap(value)
            if id(module) in seen or (id(module) in covered and not _is_root(module, attrs)):
                continue  # an alias, or a piece of another saved module
            seen[id(module)] = name
            state.append((name, module))
            for attr_name, attr in vars(module).items():
                if isinstance(attr, torch.optim.Optimizer) and id(attr) not in seen:
                    seen[id(attr)] = f"{name}.{attr_name}"
                    state.append((f"{name}.{attr_name}", attr))
        elif _holds_stateful(value):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                item = _unwrap(item)
                if id(item) not in seen:
                    seen[id(item)] = f"{name}.{key}"
                    state.append((f"{name}.{key}", item))
        elif isinstance(value, torch.Tensor):
            if id(value) in covered or id(value) in seen:
                continue
            seen[id(value)] = name
            variables[name] = value
        # Live handles first: a gymnasium 0.29 wrapper forwards `state_dict` to its env, warning.
        elif not _is_live_handle(value) and _is_stateful(value):
            if id(value) in seen:
                continue
            seen[id(value)] = name
            state.append((name, value))
        elif _is_live_handle(value) and name not in include:
            continue
        else:
            data[name] = value
    init = None
    if isinstance(obj, Saveable):
        init = obj._zipsave_init_record()
    return _Parts(data, state, variables, components, init)


def _holds_stateful(value: Any) -> bool:
    """A plain list/tuple/dict of modules or optimizers (e.g. ``self.critics = [q1, q2]``)."""
    if type(value) in (list, tuple):
        items = list(value)
    elif type(value) is dict and all(type(k) is str and k and "." not in k and "/" not in k for k in value):
        items = list(value.values())
    else:
        return False
    return bool(items) and all(_is_stateful(v) and not _is_live_handle(v) for v in items)


def _is_root(module: torch.nn.Module, attrs: dict) -> bool:
    """True when no other module attribute contains ``module``."""
    for other in attrs.values():
        if isinstance(other, torch.nn.Module) and other is not module:
            if any(sub is module for sub in _unwrap(other).modules()):
                return False
    return True


def _collect_sb3(obj: Any, exclude: set, include: set) -> _Parts:
    """SB3's own rules (``BaseAlgorithm.save``): its hooks decide what is torch-saved.
    ``include`` may also name the extras SB3 keeps in separate pickles (``_sb3.EXTRAS``)."""
    from ._sb3 import EXTRAS, collect_extras, sb3_stand_in

    extras = collect_extras(obj, include)
    include = include - set(EXTRAS)
    state_names, var_names = obj._get_torch_save_params()
    excluded = (set(obj._excluded_save_params()) | exclude) - include
    for name in list(state_names) + list(var_names):
        excluded.add(name.split(".")[0])
    data = {k: v for k, v in obj.__dict__.items() if k not in excluded and not k.startswith(_ALWAYS_EXCLUDED_PREFIXES)}
    state = [(name, _unwrap(_recursive_getattr(obj, name))) for name in state_names]
    variables = {name: _recursive_getattr(obj, name) for name in var_names}
    return _Parts(data, state, variables, extras, encoder_options={"stand_in": sb3_stand_in})


def _collect_app_state(app: dict, exclude: set, include: set) -> _Parts:
    data: dict[str, Any] = {}
    state: list[tuple[str, Any]] = []
    for key, value in app.items():
        if not isinstance(key, str):
            raise EncodeError(f"app-state keys must be strings, found {key!r}.")
        if key in exclude and key not in include:
            continue
        if _is_stateful(value):
            state.append((key, _unwrap(value)))
        else:
            data[key] = value
    return _Parts(data, state, None, [])


# -- writing -------------------------------------------------------------------------------
@dataclasses.dataclass
class _Encoded:
    """An object encoded and ready to write; tensors are still references (no copies)."""

    folder: str
    data: bytes
    init: bytes | None
    state: list[tuple[str, Any]]
    variables: dict[str, torch.Tensor] | None
    arrays: list[tuple[str, np.ndarray]]
    components: list[_Encoded]


def _encode(parts: _Parts, folder: str, *, exclude: Iterable[str] | None, include: Iterable[str] | None) -> _Encoded:
    arrays: list[tuple[str, np.ndarray]] = []

    def add_array(arr: np.ndarray) -> str:
        name = _format.join(folder, f"{_format.ARRAYS_DIR}{len(arrays)}{_format.NPY_SUFFIX}")
        arrays.append((name, arr))
        return name

    encoder = Encoder(add_array=add_array, **parts.encoder_options)
    data = {key: encoder.encode_entry(key, value) for key, value in parts.data.items()}
    init = None
    if parts.init is not None:
        args: dict[str, Any] = {}
        component_of = {id(comp): name for name, comp in parts.components}
        for key, value in parts.init["args"].items():
            if _is_live_handle(value):
                args[key] = None
                continue
            if id(value) in component_of:
                # A component passed to the constructor: built from its folder first on load.
                args[key] = {_format.TYPE_KEY: str(type(value)),
                             _format.NATIVE_KEY: {"kind": "component", "path": component_of[id(value)]}}
                continue
            try:
                args[key] = encoder.encode_entry(key, value)
            except EncodeError as err:
                raise EncodeError(
                    f"constructor argument `{key}` cannot be saved ({err.detail}).",
                    member=_format.join(folder, _format.INIT),
                    hint="Pass it again when loading, e.g. `Algo.load(path, " + f"{key}=...)`.",
                ) from err
        init = dump_json({"class": parts.init["class"], "args": args})
    state = []
    for name, provider in parts.state:
        try:
            state.append((name, provider.state_dict() if _is_stateful(provider) else provider))
        except Exception as err:
            raise EncodeError(
                f"`{name}.state_dict()` failed ({type(err).__name__}: {err}); nothing was written.",
                key=name,
                hint=f"Fix the object, or leave it out with `exclude=[{name!r}]`.",
            ) from err
    components = []
    for name, comp in parts.components:
        sub = _format.join(folder, name)
        components.append(_encode(_collect(comp, _nested(exclude, name), _nested(include, name)), sub, exclude=None, include=None))
    return _Encoded(folder, dump_json(data), init, state, parts.variables, arrays, components)


def _nested(patterns: Iterable[str] | None, prefix: str) -> list[str]:
    """Exclude/include patterns addressed to a component: ``"learner/opt"`` -> ``"opt"``.

    A pattern that starts with ``*`` (``"*.optimizer"``) applies at every depth, as
    fnmatch's ``*`` also matches ``/``.
    """
    out = []
    for p in patterns or ():
        if p.startswith(prefix + "/"):
            out.append(p[len(prefix) + 1 :])
        elif p.startswith("*"):
            out.append(p)
    return out


def _write_encoded(writer: ArchiveWriter, enc: _Encoded, *, root: bool) -> None:
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
            np.lib.format.write_array(f, np.asarray(arr, order="C"), allow_pickle=False)  # keeps 0-d arrays 0-d
    for comp in enc.components:
        _write_encoded(writer, comp, root=False)
    if root:
        writer.write_bytes(_format.VERSION, f"zipsave {__version__}\nformat {_format.FORMAT_VERSION}\n".encode())
        writer.write_bytes(_format.SYSTEM_INFO, _system_info_text(_system_info.get_system_info))
        writer.write_manifest()


@functools.lru_cache(maxsize=4)
def _system_info_text(get_info: Any) -> bytes:
    """``system_info.txt``, collected once per process: versions do not change while it runs,
    and reading five packages' metadata costs ~8 ms, more than saving a small model."""
    return _system_info.format_system_info(get_info()).encode()


def _is_url(path: Any) -> bool:
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def _output_path(path: Any) -> str:
    path = os.fspath(path)
    if path.startswith("file://"):
        path = path[len("file://") :]
    if os.path.splitext(path)[1] == "":
        path += ".zip"
    if os.path.isdir(path):
        raise ArchiveFormatError("is a directory; give a file name such as `model.zip`.", archive=path)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    return path


def _write_to(path: Any, write: Any, *, storage_options: dict | None = None, progress: bool = False) -> None:
    """Run ``write(fp)`` against the destination: atomically for paths and URLs, as-is for files."""
    if hasattr(path, "write"):
        write(path)
        return
    if _is_url(path):
        from ._remote import remote_output

        with remote_output(path, storage_options=storage_options, progress=progress) as fp:
            write(fp)
        return
    with atomic_output(_output_path(path)) as fp:
        write(fp)


def _save_encoded(
    enc: _Encoded, path: Any, *, storage_options: dict | None = None, progress: bool = False, sha256: bool = False
) -> None:
    def write(fp: IO[bytes]) -> None:
        total = _progress.encoded_size(enc) if progress else None
        with _progress.counting_writer(fp, progress, total=total, desc=f"zipsave save {_progress.describe(path)}") as out:
            writer = ArchiveWriter(out, sha256=True if sha256 else None)
            try:
                _write_encoded(writer, enc, root=True)
                writer.close()
            except BaseException:
                writer.abort()
                raise

    _write_to(path, write, storage_options=storage_options, progress=progress)


def save(
    obj: Any,
    path: Any,
    *,
    exclude: Iterable[str] | None = None,
    include: Iterable[str] | None = None,
    background: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    sha256: bool = False,
) -> Any:
    """Save a model, a :class:`~zipsave.Saveable`, an SB3 algorithm or an app-state dict.

    Parameters
    ----------
    obj
        What to save. Attributes holding modules, optimizers and other objects with
        ``state_dict``/``load_state_dict`` become ``.pth`` members; loose tensors go to
        ``pytorch_variables.pth``; nested ``Saveable`` attributes become component folders;
        everything else goes to ``data``. A dict is saved as app state (one member per
        stateful value, the rest in ``data``).
    path
        A file path (``.zip`` is appended when it has no suffix), an ``fsspec`` URL, or a
        writable binary file object (not closed).
    exclude, include
        Attribute names (glob patterns allowed; ``"learner/opt"`` addresses a component) to
        leave out of, or force into, the archive. For an SB3 model, ``include`` may also
        name ``"replay_buffer"`` and ``"vec_normalize"``: stored as arrays in component
        folders of the same archive and restored by :func:`load` (see :doc:`sb3`).
    background
        Return at once with a :class:`~zipsave.SaveHandle`; the archive reflects the state
        at the moment of the call (tensors are copied before returning) and is written on a
        worker thread. Saves to the same destination are written in call order.
    storage_options
        Options for the fsspec filesystem of a URL ``path`` (e.g. ``{"key": ...,
        "client_kwargs": {"endpoint_url": ...}}`` for ``s3://``); needs the ``remote`` extra.
    progress
        Show a tqdm progress bar (the ``progress`` extra); silent by default.
    sha256
        Also record the SHA-256 of the tensor members (``.pth``, ``.npy``) in
        ``manifest.json``. Every member always gets its size and CRC-32 (checked on load),
        and the members written from memory (``data``, ``init.json``, ...) a SHA-256;
        hashing the tensors too runs at about 1.5 GB/s and roughly triples a large save.

    Returns
    -------
    None, or a :class:`~zipsave.SaveHandle` when ``background=True``.

    Raises
    ------
    EncodeError
        A value can be neither encoded nor pickled; nothing is written.

    Examples
    --------
    >>> zipsave.save(model, "model.zip")  # doctest: +SKIP
    """
    _progress.check(progress)
    exclude = list(exclude or ())
    include = list(include or ())
    parts = _collect(obj, _flat(exclude), _flat(include))
    enc = _encode(parts, "", exclude=exclude, include=include)
    from ._background import start_background_save, wait_for_pending

    if background:
        save_fn = functools.partial(_save_encoded, storage_options=storage_options, progress=progress, sha256=sha256)
        return start_background_save(enc, path, save_fn)
    wait_for_pending(path)  # an earlier background save to the same place must not land last
    _save_encoded(enc, path, storage_options=storage_options, progress=progress, sha256=sha256)
    return None


def _flat(patterns: list[str]) -> list[str]:
    return [p for p in patterns if "/" not in p]


def save_archive(
    path: Any,
    data: dict[str, Any] | None = None,
    params: dict[str, dict[str, Any]] | None = None,
    pytorch_variables: dict[str, torch.Tensor] | None = None,
) -> None:
    """Write an archive from its parts, as SB3's ``save_to_zip_file`` does.

    Parameters
    ----------
    path
        File path, URL or writable binary file object.
    data
        Class parameters for the ``data`` member (``None`` writes an empty object).
    params
        ``{name: state_dict}``; each becomes ``<name>.pth``.
    pytorch_variables
        Loose tensors for ``pytorch_variables.pth``.
    """
    parts = _Parts(dict(data or {}), list((params or {}).items()), dict(pytorch_variables or {}), [])
    _save_encoded(_encode(parts, "", exclude=None, include=None), path)


# -- reading ---------------------------------------------------------------------------------
class _Source:
    """An open archive plus everything a load needs: trust policy, device, skip rules."""

    def __init__(
        self,
        path: Any,
        *,
        policy: TrustPolicy,
        device: Any = "auto",
        limits: Limits | None = None,
        strict: bool = False,
        report: LoadReport | None = None,
        verify: bool = True,
        mmap: bool = False,
        storage_options: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> None:
        self.policy = policy
        self.device = get_device(device)
        self.limits = limits or DEFAULT_LIMITS
        self.strict = strict
        self.verify = verify
        self.mmap = mmap
        self.storage_options = storage_options
        self.progress = progress
        self._saved_versions: dict[str, str] | None = None
        _progress.check(progress)
        self._stack = contextlib.ExitStack()
        fp, name = self._open(path)
        fp = _progress.counting_reader(fp, progress, desc=f"zipsave load {name}", stack=self._stack)
        self.name = name
        self.built_components: set[str] = set()
        self.report = report if report is not None else LoadReport()
        self.report.archive = name
        try:
            self.reader = ArchiveReader(fp, archive=name, limits=self.limits)
        except BaseException:
            self._stack.close()
            raise
        try:
            self._check_format_version()
            if self.reader.manifest_error and self.verify:
                self._integrity(self.reader.manifest_error, None)
            if self.verify and self.reader.manifest is not None:
                for lost in sorted(set(self.reader.manifest) - set(self.reader.names())):
                    self._integrity("is listed in manifest.json but missing from the archive.", lost)
            if self.has(_format.VERSION) or self.reader.manifest is not None:
                for name in _unrecognised(self.reader.names()):
                    self.skip(name, None, None, ArchiveFormatError(
                        "is not a member zipsave writes (renamed, damaged, or added by another tool); ignored."))
        except BaseException:
            self._stack.close()
            raise

    def _check_format_version(self) -> None:
        """Refuse an archive written in a newer format than this zipsave reads."""
        if not self.has(_format.VERSION):
            return
        text = self.reader.read(_format.VERSION, limit=4096, verify=False).decode("utf-8", "replace")
        for line in text.splitlines():
            word, _, value = line.partition(" ")
            if word == "format" and value.strip().isdigit() and int(value) > _format.FORMAT_VERSION:
                raise ArchiveFormatError(
                    f"uses archive format {int(value)}; this zipsave ({__version__}) reads formats up to "
                    f"{_format.FORMAT_VERSION}.",
                    archive=self.name,
                    member=_format.VERSION,
                    hint="Upgrade zipsave (`pip install -U zipsave`).",
                )

    def _open(self, path: Any) -> tuple[IO[bytes], str]:
        if hasattr(path, "read"):
            name = getattr(path, "name", None)
            label = name if isinstance(name, str) else f"<{type(path).__name__}>"
            if not (hasattr(path, "seek") and _seekable(path)):
                return self._stack.enter_context(_spooled(path)), label
            return path, label
        if _is_url(path):
            from ._remote import remote_input

            opened = remote_input(path, storage_options=self.storage_options, progress=self.progress)
            return self._stack.enter_context(opened), path
        text = os.fspath(path)
        if text.startswith("file://"):
            text = text[len("file://") :]
        fp = open_input(text)
        self._stack.callback(fp.close)
        return fp, fp.name

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> _Source:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- skip rules --------------------------------------------------------------------------
    def skip(self, member: str, key: str | None, type_hint: str | None, err: BaseException) -> None:
        cause = err.detail if isinstance(err, ZipsaveError) else f"{type(err).__name__}: {err}"
        if isinstance(err, ZipsaveError) and err.hint:
            cause = f"{cause} {err.hint}"
        entry = SkippedEntry(member, key, type_hint, cause)
        if self.strict:
            if isinstance(err, ZipsaveError):
                err.archive = err.archive or self.name
                err.member = err.member or member
                err.key = err.key or key
                err.args = (err._compose(),)
                raise err
            raise DecodeError(f"could not be loaded: {cause}", archive=self.name, member=member, key=key) from err
        self.report.skipped.append(entry)
        warnings.warn(SkippedEntryWarning(entry, self.name), stacklevel=4)

    def _integrity(self, message: str, member: str | None) -> None:
        if self.strict:
            raise IntegrityError(message, archive=self.name, member=member)
        self.report.notes.append(f"{member}: {message}" if member else message)
        where = f"member `{member}` " if member else ""
        warnings.warn(ZipsaveWarning(f"archive `{self.name}`: {where}{message}"), stacklevel=4)

    # -- members -------------------------------------------------------------------------------
    def has(self, member: str) -> bool:
        return member in self.reader

    def read_json(self, member: str) -> Any:
        """Read and parse a JSON member. An edited ``data``/``init.json`` (hash mismatch) is
        reported and still decoded; any other member must match its manifest entry."""
        raw = self.reader.read(member, limit=self.limits.max_json_bytes, verify=False)
        if self.verify:
            try:
                self.reader.check_recorded(member)
                self.reader.check_digest(member, raw)
            except IntegrityError as err:
                if os.path.basename(member) in _format.EDITABLE:
                    self._integrity(
                        f"{err.detail} It was edited after saving; decoding it key by key.", member
                    )
                else:
                    raise
        try:
            return parse_json(raw, max_depth=self.limits.max_json_depth)
        except ZipsaveError as err:
            err.archive, err.member = self.name, member
            err.args = (err._compose(),)
            raise

    def load_array(self, member: str) -> np.ndarray:
        if not member.endswith(_format.NPY_SUFFIX) or member not in self.reader:
            raise DecodeError(f"refers to array member `{member}`, which the archive does not hold.")
        self._check_member(member)
        view = self.reader.open_view(member)
        try:
            return read_npy(view, member=member, expected_crc=self.reader.info(member).CRC if self.verify else None)
        finally:
            view.close()

    def _check_member(self, member: str) -> None:
        if self.verify:
            self.reader.check_recorded(member)

    def load_tensors(self, member: str, targets: Any = None, **checks: Any) -> tuple[Any, set]:
        """Load a ``.pth`` member (into ``targets`` in place where shapes match); ``checks``
        are ``load_pth``'s ``check_shapes`` / ``check_dtypes`` / ``validate``."""
        self._check_member(member)
        info = self.reader.info(member)
        view = self.reader.open_view(member)
        try:
            return load_pth(
                view,
                device=self.device,
                targets=targets,
                verify_crc=info.CRC if self.verify and not self.mmap else None,
                mmap=self.mmap and targets is None,
                **checks,
            )
        except ZipsaveError as err:
            err.archive, err.member = self.name, member
            err.args = (err._compose(),)
            raise
        except Exception as err:
            raise ArchiveFormatError(
                f"is not a loadable torch state ({type(err).__name__}: {err}).", archive=self.name, member=member
            ) from err

    def decode_data(
        self,
        folder: str,
        *,
        custom_objects: dict[str, Any] | None = None,
        exclude: Iterable[str] = (),
    ) -> dict[str, Any] | None:
        member = _format.join(folder, _format.DATA)
        if not self.has(member):
            return None
        raw = self.read_json(member)
        if not isinstance(raw, dict):
            raise ArchiveFormatError(
                f"must hold a JSON object, found {type(raw).__name__}.", archive=self.name, member=member
            )
        return self.decode_entries(raw, member, custom_objects=custom_objects, exclude=exclude)

    def decoder(self, member: str) -> Decoder:
        """A decoder for one JSON member, under this load's trust policy, device and limits."""
        return Decoder(
            self.policy,
            load_array=self.load_array,
            device=self.device,
            max_depth=self.limits.max_json_depth,
            archive=self.name,
            member=member,
            saved_versions=self.saved_versions,
        )

    def saved_versions(self) -> dict[str, str]:
        """The versions in the archive's ``system_info.txt`` (empty if it has none or it
        cannot be read): which gymnasium, numpy... wrote it, for error messages."""
        if self._saved_versions is None:
            self._saved_versions = {}
            if self.has(_format.SYSTEM_INFO):
                try:
                    raw = self.reader.read(_format.SYSTEM_INFO, limit=1 << 20, verify=False)
                    self._saved_versions = _system_info.parse_system_info(raw.decode("utf-8", "replace"))
                except ZipsaveError:
                    pass  # only used to word an error; the error itself still comes
        return self._saved_versions

    def decode_entries(
        self, raw: dict, member: str, *, custom_objects: dict[str, Any] | None = None, exclude: Iterable[str] = ()
    ) -> dict[str, Any]:
        decoder = self.decoder(member)
        out: dict[str, Any] = {}
        exclude = list(exclude)
        for key, value in raw.items():
            if custom_objects is not None and key in custom_objects:
                out[key] = custom_objects[key]
                continue
            if exclude and _matches(key, exclude):
                continue
            try:
                out[key] = decoder.decode_entry(key, value)
            except Exception as err:  # noqa: BLE001 - the skip rule covers every failure
                hint = value.get(_format.TYPE_KEY) if isinstance(value, dict) else None
                self.skip(member, key, hint if isinstance(hint, str) else None, err)
        return out


_KNOWN_MEMBERS = frozenset({
    _format.DATA, _format.INIT, _format.VERSION, _format.SB3_VERSION, _format.SYSTEM_INFO, _format.MANIFEST,
})


def _unrecognised(names: Iterable[str]) -> list[str]:
    """Members of a zipsave archive that no reader of the format looks at."""
    out = []
    for name in names:
        folder, _, base = name.rpartition("/")
        if not base:  # a directory entry added by a zip tool
            continue
        if base in _KNOWN_MEMBERS or base.endswith(_format.PTH_SUFFIX):
            continue
        if base.endswith(_format.NPY_SUFFIX) and (folder + "/").endswith(_format.ARRAYS_DIR):
            continue
        out.append(name)
    return out


def _seekable(fp: Any) -> bool:
    try:
        return bool(fp.seekable())
    except (AttributeError, OSError, ValueError):
        return False


@contextlib.contextmanager
def _spooled(fp: Any) -> Iterator[IO[bytes]]:
    """Copy a non-seekable stream to a temporary file (zip needs random access)."""
    import shutil
    import tempfile

    with tempfile.TemporaryFile() as spool:
        shutil.copyfileobj(fp, spool, 16 << 20)
        spool.seek(0)
        yield spool


def _check_custom_objects(custom_objects: Any) -> dict | None:
    if custom_objects is not None and not isinstance(custom_objects, dict):
        raise TypeError(f"custom_objects must be a dict or None, found {type(custom_objects).__name__}.")
    return custom_objects


def load_archive(
    path: Any,
    *,
    load_data: bool = True,
    custom_objects: dict[str, Any] | None = None,
    device: Any = "auto",
    print_system_info: bool = False,
    allow_pickle: bool = False,
    trusted: Iterable[Any] = (),
    strict: bool = False,
    limits: Limits | None = None,
    report: LoadReport | None = None,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, torch.Tensor] | None]:
    """Read an archive's parts, as SB3's ``load_from_zip_file`` does.

    Parameters
    ----------
    path
        File path (``.zip`` is tried too), URL, or readable binary file object (not closed).
    load_data
        Decode ``data``; ``False`` returns ``None`` for it and unpickles nothing.
    custom_objects
        ``{key: value}`` used instead of those ``data`` keys, which are never decoded.
    device
        Where every tensor goes, including tensors inside ``data``.
    print_system_info
        Print the saved and the current system info and the differences that matter.
    allow_pickle, trusted
        See :doc:`security`: by default pickled entries decode only through an allowlist.
    strict
        Raise instead of skipping a broken entry.
    limits
        Safety limits (:class:`~zipsave.Limits`).
    report
        A :class:`LoadReport` to fill with the skipped entries.
    storage_options
        Options for the fsspec filesystem of a URL ``path`` (the ``remote`` extra).
    progress
        Show a tqdm progress bar (the ``progress`` extra).

    Returns
    -------
    tuple
        ``(data, params, pytorch_variables)``: ``data`` as a dict (or ``None``), ``{name: state_dict}`` for every ``.pth`` member,
        and the loose tensors (or ``None`` when the archive has none).
    """
    custom_objects = _check_custom_objects(custom_objects)
    policy = TrustPolicy.make(allow_pickle=allow_pickle, trusted=trusted)
    with _Source(
        path, policy=policy, device=device, limits=limits, strict=strict, report=report,
        storage_options=storage_options, progress=progress,
    ) as src:
        if print_system_info:
            _print_system_info(src)
        data = src.decode_data("", custom_objects=custom_objects) if load_data else None
        params: dict[str, Any] = {}
        variables = None
        for name in src.reader.names():
            if "/" in name or not name.endswith(_format.PTH_SUFFIX):
                continue
            try:
                tree, _ = src.load_tensors(name)
            except ZipsaveError as err:
                src.skip(name, None, None, err)
                continue
            if name in (_format.PYTORCH_VARIABLES, _format.LEGACY_PYTORCH_VARIABLES):
                variables = tree
            else:
                params[name[: -len(_format.PTH_SUFFIX)]] = tree
        return data, params, variables


def _print_system_info(src: _Source) -> None:
    text = None
    if src.has(_format.SYSTEM_INFO):
        try:
            text = src.reader.read(_format.SYSTEM_INFO, limit=1 << 20, verify=False).decode("utf-8", "replace")
        except ZipsaveError as err:
            text = f"(unreadable: {err})"
    _system_info.print_system_info(text)


# -- restore and load ------------------------------------------------------------------------
def _restore_parts(
    src: _Source,
    obj: Any,
    folder: str,
    *,
    custom_objects: dict | None,
    exclude: list[str],
    exact_match: bool,
    set_data: bool,
    overrides: dict[str, Any] | None = None,
) -> None:
    """Load one folder's parts into ``obj`` in place (the core of load and restore)."""
    from .saveable import Saveable

    is_dict = isinstance(obj, dict)
    if set_data:
        data = src.decode_data(folder, custom_objects=custom_objects, exclude=exclude) or {}
        for key, value in data.items():
            if overrides and key in overrides:
                continue
            if is_dict:
                if key in obj and _is_stateful(obj[key]):
                    continue
                obj[key] = value
            else:
                setattr(obj, key, value)
    prefix = f"{folder}/" if folder else ""
    members = [n for n in src.reader.names() if n.startswith(prefix) and "/" not in n[len(prefix) :]]
    names = [n[len(prefix) : -len(_format.PTH_SUFFIX)] for n in members if n.endswith(_format.PTH_SUFFIX)]
    variables_name = _format.PYTORCH_VARIABLES[: -len(_format.PTH_SUFFIX)]
    state_names = [n for n in names if n not in (variables_name, "tensors")]
    if exact_match and not is_dict:
        expected = _expected_state_names(obj)
        if expected is not None and exclude:
            # what the caller left out (``exclude=["*.optimizer"]``) is missing on purpose
            expected = [n for n in expected if not _matches(n, exclude)]
        if expected is not None and set(expected) != {n for n in state_names if not (exclude and _matches(n, exclude))}:
            raise ParameterMismatchError(
                f"holds state dicts {sorted(state_names)}, but the object has {sorted(expected)}.",
                archive=src.name,
                member=folder or None,
                hint="Pass `exact_match=False` to load the ones that match.",
            )
    for name in state_names:
        member = prefix + name + _format.PTH_SUFFIX
        if exclude and _matches(name, exclude):
            continue
        try:
            target = obj[name] if is_dict else _recursive_getattr(obj, name)
        except (AttributeError, KeyError):
            err = ParameterMismatchError(
                f"`{name}` is not an attribute of {type(obj).__name__}.", archive=src.name, member=member
            )
            if exact_match:
                raise err from None
            src.skip(member, None, None, err)
            continue
        try:
            _load_state_into(src, member, _unwrap(target), exact_match)
        except ParameterMismatchError:
            raise
        except ZipsaveError as err:
            src.skip(member, None, None, err)
    var_member = prefix + _format.PYTORCH_VARIABLES
    if var_member in src.reader and not is_dict:
        try:
            variables, _ = src.load_tensors(var_member)
        except ZipsaveError as err:
            src.skip(var_member, None, None, err)
            variables = {}
        for name, value in (variables or {}).items():
            if exclude and _matches(name, exclude):
                continue
            _set_variable(obj, name, value)
    for child in _child_components(src, folder):
        attr_path = child[len(prefix) :]
        if exclude and _matches(attr_path, exclude):
            continue
        parent, _, last = attr_path.rpartition("/")
        holder = getattr(obj, parent, None) if parent else obj
        if holder is None:  # a dict of components the constructor did not create
            holder = {}
            setattr(obj, parent, holder)
        current = holder.get(last) if isinstance(holder, dict) else getattr(holder, last, None)
        if hasattr(obj, "_setup_model") and not is_dict:
            from ._sb3 import EXTRAS, restore_extra

            if attr_path in EXTRAS:
                restore_extra(src, obj, attr_path)  # fills the SB3 model's own buffer / wrapper
                continue
        if child in src.built_components and isinstance(current, Saveable):
            continue  # built (and restored) from its folder before the constructor ran
        if isinstance(current, Saveable):
            _restore_parts(src, current, child, custom_objects=None, exclude=_nested(exclude, attr_path),
                           exact_match=exact_match, set_data=True)
        else:
            built = _build(src, child, cls=None, custom_objects=None, exclude=_nested(exclude, attr_path), overrides={},
                           exact_match=exact_match)
            if isinstance(holder, dict):
                holder[last] = built
            else:
                setattr(holder, last, built)


def _child_components(src: _Source, folder: str) -> list[str]:
    """Component folders directly below ``folder`` (each has its own ``data``)."""
    prefix = f"{folder}/" if folder else ""
    found = []
    for name in src.reader.names():
        if not name.startswith(prefix) or not name.endswith("/" + _format.DATA):
            continue
        sub = name[: -len("/" + _format.DATA)]
        rest = sub[len(prefix) :]
        if not rest:
            continue
        # a direct child is "x" or "x/key" where "x" has no data of its own (a dict of components)
        parts = rest.split("/")
        if len(parts) == 1 or (len(parts) == 2 and _format.join(prefix + parts[0], _format.DATA) not in src.reader):
            found.append(sub)
    return found


def _expected_state_names(obj: Any) -> list[str] | None:
    if hasattr(obj, "_get_torch_save_params"):
        return list(obj._get_torch_save_params()[0])
    try:
        parts = _collect(obj, None, None)
    except ZipsaveError:
        return None
    return [name for name, _ in parts.state]


def _load_state_into(src: _Source, member: str, target: Any, exact_match: bool) -> None:
    if isinstance(target, torch.nn.Module):
        current = target.state_dict(keep_vars=True)

        def fits_module(tree: Any) -> None:  # checked before any byte lands in the module
            if not isinstance(tree, dict):
                raise ArchiveFormatError(f"holds a {type(tree).__name__}, expected a state dict.")
            if exact_match and set(tree) != set(current):
                missing = sorted(set(current) - set(tree))
                unexpected = sorted(set(tree) - set(current))
                raise ParameterMismatchError(
                    f"state dict does not match the module: missing keys {missing}, unexpected keys {unexpected}.",
                    hint="Pass `exact_match=False` to load the keys that match.",
                )

        tree, _filled = src.load_tensors(
            member, current, check_shapes=True, check_dtypes=exact_match, validate=fits_module
        )
        try:
            # Tensors filled in place are passed as themselves: copy_ of a tensor onto itself
            # is a no-op, and the module's load hooks still run.
            target.load_state_dict(tree, strict=exact_match)
        except RuntimeError as err:
            raise ParameterMismatchError(f"does not fit the module: {err}", archive=src.name, member=member) from err
        return
    if isinstance(target, torch.optim.Optimizer):
        current_state = target.state_dict()

        def fits_optimizer(tree: Any) -> None:
            groups = tree.get("param_groups") if isinstance(tree, dict) else None
            if not isinstance(groups, list) or [len(g.get("params", ())) for g in groups if isinstance(g, dict)] != [
                len(g["params"]) for g in current_state["param_groups"]
            ]:
                raise ParameterMismatchError(
                    "optimizer state does not match the optimizer's parameter groups (another model?)."
                )

        tree, _ = src.load_tensors(member, current_state, check_shapes=True, validate=fits_optimizer)
        try:
            target.load_state_dict(tree)
        except (ValueError, KeyError, RuntimeError) as err:
            raise ParameterMismatchError(f"does not fit the optimizer: {err}", archive=src.name, member=member) from err
        return
    if _is_stateful(target):
        existing: Any = None
        with contextlib.suppress(Exception):
            existing = target.state_dict()
        tree, _ = src.load_tensors(member, existing)
        target.load_state_dict(tree)
        return
    raise ParameterMismatchError(
        f"cannot load a state dict into {type(target).__name__} (it has no `load_state_dict`).",
        archive=src.name,
        member=member,
    )


def _set_variable(obj: Any, name: str, value: Any) -> None:
    if value is None:
        return
    try:
        current = _recursive_getattr(obj, name)
    except AttributeError:
        current = None
    if isinstance(current, torch.Tensor) and isinstance(value, torch.Tensor) and current.shape == value.shape:
        with torch.no_grad():
            current.data.copy_(value.data)
    else:
        _recursive_setattr(obj, name, value)


def _resolve_class(src: _Source, record: dict, member: str, cls: Any) -> Any:
    from .saveable import Saveable

    if cls is not None:
        return cls
    path = record.get("class")
    if not isinstance(path, str) or ":" not in path:
        raise ArchiveFormatError("has no `class` import path; pass `cls=`.", archive=src.name, member=member)
    module, qualname = path.split(":", 1)
    import importlib

    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as err:
        raise DecodeError(
            f"class `{path}` cannot be imported ({err}).", archive=src.name, member=member,
            hint="Install or import the package that defines it, or pass `cls=`.",
        ) from err
    if not (isinstance(found, type) and issubclass(found, Saveable)):
        raise UnsafeGlobalError(
            path.replace(":", "."), archive=src.name, member=member,
            hint="Only zipsave.Saveable subclasses are built from init.json; pass `cls=` to choose the class yourself.",
        )
    return found


def _build(
    src: _Source,
    folder: str,
    *,
    cls: Any,
    custom_objects: dict | None,
    exclude: list[str],
    overrides: dict[str, Any],
    exact_match: bool = True,
) -> Any:
    """Construct a fresh object from ``init.json`` (or ``cls``), then restore into it."""
    init_member = _format.join(folder, _format.INIT)
    if cls is not None and hasattr(cls, "_setup_model") and not src.has(init_member):
        from ._sb3 import build_sb3

        return build_sb3(src, cls, custom_objects=custom_objects, exclude=exclude, overrides=overrides)
    if not src.has(init_member):
        if cls is None:
            raise ArchiveFormatError(
                "has no init.json, so zipsave does not know what to build.",
                archive=src.name,
                member=init_member,
                hint="Pass `cls=` (e.g. `zipsave.load(path, cls=PPO, env=env)`), or use `load_archive`/`restore`.",
            )
        record: dict[str, Any] = {"args": {}}
    else:
        record = src.read_json(init_member)
        if not isinstance(record, dict) or not isinstance(record.get("args", {}), dict):
            raise ArchiveFormatError("must hold an object with `class` and `args`.", archive=src.name, member=init_member)
    klass = _resolve_class(src, record, init_member, cls)
    raw_args = record.get("args", {})
    built: dict[str, Any] = dict(custom_objects or {})
    for key, raw in raw_args.items():
        native = raw.get(_format.NATIVE_KEY) if isinstance(raw, dict) else None
        if isinstance(native, dict) and native.get("kind") == "component" and key not in built:
            child = _format.join(folder, str(native.get("path", "")))
            if key in overrides:
                built[key] = overrides[key]
                continue
            built[key] = _build(src, child, cls=None, custom_objects=None, exclude=_nested(exclude, str(native.get("path"))),
                                overrides={}, exact_match=exact_match)
            src.built_components.add(child)
    args = src.decode_entries(raw_args, init_member, custom_objects=built or None)
    import inspect as _inspect

    params: Any
    try:
        params = _inspect.signature(klass.__init__).parameters
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        params, accepts_any = {}, True
    late: dict[str, Any] = {}
    for key, value in overrides.items():
        if key in params or accepts_any:
            args[key] = value
        else:
            late[key] = value
    try:
        obj = klass(**args)
    except Exception as err:
        raise DecodeError(
            f"building {klass.__name__}(**args) failed: {type(err).__name__}: {err}",
            archive=src.name,
            member=init_member,
            hint="Pass the missing or broken constructor arguments as keyword overrides to load().",
        ) from err
    _restore_parts(
        src, obj, folder, custom_objects=custom_objects, exclude=exclude, exact_match=exact_match,
        set_data=True, overrides=args | late,
    )
    for key, value in late.items():
        setattr(obj, key, value)
    return obj


def load(
    path: Any,
    *,
    cls: Any = None,
    component: str | None = None,
    exclude: Iterable[str] | None = None,
    custom_objects: dict[str, Any] | None = None,
    device: Any = "auto",
    print_system_info: bool = False,
    allow_pickle: bool = False,
    trusted: Iterable[Any] = (),
    strict: bool = False,
    limits: Limits | None = None,
    report: LoadReport | None = None,
    mmap: bool = False,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    **overrides: Any,
) -> Any:
    """Rebuild a saved object: a :class:`~zipsave.Saveable`, an SB3 algorithm (``cls=PPO``),
    or an app-state dict.

    Parameters
    ----------
    path
        File path (``.zip`` is tried too), URL, or readable binary file object (not closed).
    cls
        The class to build; by default the one recorded in ``init.json`` (only
        ``Saveable`` subclasses are built from the archive's say-so).
    component
        Load only this component folder, e.g. ``"learner/module/p0"``. A folder holding a
        dict of components (``"learner/module"``) comes back as a dict of rebuilt objects.
    exclude
        Keys or state-dict names to skip (glob patterns), e.g. ``["*.optimizer"]`` to load
        for inference without optimizer state. ``"learner/x"`` addresses a component; a
        pattern starting with ``*`` applies in every component.
    custom_objects
        ``{key: value}`` used instead of those ``data`` keys, which are never decoded.
    device
        Where every tensor goes, including tensors inside ``data``.
    print_system_info
        Print the saved and current system info and the differences that matter.
    allow_pickle, trusted
        By default pickled entries decode only through an allowlist; see :doc:`security`.
    strict
        Raise instead of skipping a broken entry.
    limits
        Safety limits (:class:`~zipsave.Limits`).
    report
        A :class:`LoadReport` to fill with the skipped entries.
    mmap
        Map tensor records from the file instead of reading them (lazy start-up).
    storage_options
        Options for the fsspec filesystem of a URL ``path`` (the ``remote`` extra).
    progress
        Show a tqdm progress bar (the ``progress`` extra); silent by default.
    **overrides
        Constructor arguments (``env=...``) or attributes that win over the saved ones.

    Returns
    -------
    object
        The rebuilt object. An app-state archive (no ``init.json``) comes back as a dict.

    Examples
    --------
    >>> model = zipsave.load("model.zip", env=env)  # doctest: +SKIP
    """
    custom_objects = _check_custom_objects(custom_objects)
    policy = TrustPolicy.make(allow_pickle=allow_pickle, trusted=trusted)
    exclude = list(exclude or ())
    with _Source(
        path, policy=policy, device=device, limits=limits, strict=strict, report=report, mmap=mmap,
        storage_options=storage_options, progress=progress,
    ) as src:
        if print_system_info:
            _print_system_info(src)
        folder = (component or "").strip("/")
        _check_component(src, folder)
        if folder and not src.has(_format.join(folder, _format.DATA)):  # a dict of components
            return {
                child.rpartition("/")[2]: _build(src, child, cls=cls, custom_objects=custom_objects, exclude=exclude,
                                                 overrides=dict(overrides))
                for child in _child_components(src, folder)
            }
        if not src.has(_format.join(folder, _format.DATA)) and not src.has(_format.join(folder, _format.INIT)):
            raise ArchiveFormatError(
                "has no `data` member, so it holds no model (not a zipsave or SB3 model archive?).",
                archive=src.name,
                hint="Use `zipsave.load_archive` to read its tensors, or check the path.",
            )
        if cls is None and not src.has(_format.join(folder, _format.INIT)):
            if _holds_sb3_model(src, folder):
                raise ArchiveFormatError(
                    "holds a Stable-Baselines3 model, and zipsave builds one only from the class you name.",
                    archive=src.name,
                    hint="Pass it: `zipsave.load(path, cls=PPO, env=env)`, or read the parts with "
                    "`zipsave.load_archive(path)`.",
                )
            obj = _load_app_state(src, folder, custom_objects=custom_objects, exclude=exclude)
            obj.update(overrides)
            return obj
        obj = _build(src, folder, cls=cls, custom_objects=custom_objects, exclude=exclude, overrides=overrides)
        from .saveable import Saveable

        if isinstance(obj, Saveable):
            obj.zipsave_report = src.report
        return obj


def _holds_sb3_model(src: _Source, folder: str) -> bool:
    if src.has(_format.SB3_VERSION):
        return True
    member = _format.join(folder, _format.DATA)
    if not src.has(member):
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # integrity notes come again when the data is decoded
        raw = src.read_json(member)
    return isinstance(raw, dict) and "policy_class" in raw and src.has(_format.join(folder, "policy.pth"))


def _all_components(src: _Source) -> list[str]:
    return [n[: -len("/" + _format.DATA)] for n in src.reader.names() if n.endswith("/" + _format.DATA)]


def _check_component(src: _Source, folder: str) -> None:
    """``folder`` must be a component (it has ``data``) or a dict of components."""
    if folder and not src.has(_format.join(folder, _format.DATA)) and not _child_components(src, folder):
        raise ArchiveFormatError(
            f"has no component `{folder}`; components: {sorted(_all_components(src))}.", archive=src.name
        )


def _restore_target(src: _Source, obj: Any, folder: str, into: str | None) -> Any:
    """Where a restored component goes: ``into`` (an attribute path in ``obj``, ``""`` for
    ``obj`` itself), else the component's own path when ``obj`` has it, else ``obj``."""
    path = folder if into is None else into.strip("/")
    if not path:
        return obj
    parts = path.split("/")
    if into is None:
        from .saveable import Saveable

        first = obj.get(parts[0]) if isinstance(obj, dict) else getattr(obj, parts[0], None)
        if not isinstance(first, (Saveable, dict)):
            return obj  # e.g. restore(algo.learner.module["p0"], other, component="learner/module/p1")
    target = obj
    for depth, part in enumerate(parts):
        found = target.get(part) if isinstance(target, dict) else getattr(target, part, None)
        if found is None:
            where = "/".join(parts[:depth]) or "the object"
            raise ParameterMismatchError(
                f"cannot restore component `{folder}` into `{path}`: {where} ({type(target).__name__}) has no `{part}`.",
                archive=src.name,
                hint='Pass `into="attribute/path"` to choose where it goes, or `into=""` for the object itself.',
            )
        target = found
    return target


def _load_app_state(src: _Source, folder: str, *, custom_objects: dict | None, exclude: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = dict(src.decode_data(folder, custom_objects=custom_objects, exclude=exclude) or {})
    prefix = f"{folder}/" if folder else ""
    for name in src.reader.names():
        if not name.startswith(prefix) or "/" in name[len(prefix) :] or not name.endswith(_format.PTH_SUFFIX):
            continue
        key = name[len(prefix) : -len(_format.PTH_SUFFIX)]
        if name[len(prefix) :] == _format.PYTORCH_VARIABLES or (exclude and _matches(key, exclude)):
            continue
        try:
            out[key], _ = src.load_tensors(name)
        except ZipsaveError as err:
            src.skip(name, None, None, err)
    return out


def restore(
    obj: Any,
    path: Any,
    *,
    component: str | None = None,
    exact_match: bool = True,
    strict: bool = False,
    device: Any = "auto",
    exclude: Iterable[str] | None = None,
    custom_objects: dict[str, Any] | None = None,
    allow_pickle: bool = False,
    trusted: Iterable[Any] = (),
    limits: Limits | None = None,
    report: LoadReport | None = None,
    verify: bool = True,
    into: str | None = None,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
) -> None:
    """Load an archive (or one component of it) into an existing object, in place.

    Tensors are read straight into the existing parameters and optimizer state; nothing is
    rebuilt. ``obj`` may be a :class:`~zipsave.Saveable`, any object with module/optimizer
    attributes, or an app-state dict of stateful objects and values.

    Parameters
    ----------
    obj
        The object to update.
    path
        File path, URL, or readable binary file object.
    component
        Restore only this component folder of the archive, e.g. ``"learner/module/p1"``.
        It goes to the same place in ``obj`` (``obj.learner.module["p1"]``), leaving every
        other part untouched; when ``obj`` does not hold that component (you passed the
        sub-object itself) it goes into ``obj``.
    into
        Where in ``obj`` the component goes instead, as a path of attributes and dict keys
        (``"learner/module/p0"``; ``""`` is ``obj`` itself): the self-play swap, e.g.
        ``restore(algo, "old.zip", component="learner/module/p1", into="learner/module/p0")``.
    exact_match
        Require the saved state dicts to match the object's exactly.
    strict
        Raise instead of skipping a broken entry.
    device, exclude, custom_objects, allow_pickle, trusted, limits, report
        As for :func:`load`.
    verify
        Check every member against its CRC-32 and the manifest while reading (the check runs
        on a helper thread, overlapped with the reads). ``False`` skips it, for trusted
        checkpoints restored in a tight loop.
    storage_options
        Options for the fsspec filesystem of a URL ``path`` (the ``remote`` extra).
    progress
        Show a tqdm progress bar (the ``progress`` extra); silent by default.

    Examples
    --------
    >>> zipsave.restore(algo, "ckpt.zip", component="learner/module")  # doctest: +SKIP
    """
    custom_objects = _check_custom_objects(custom_objects)
    policy = TrustPolicy.make(allow_pickle=allow_pickle, trusted=trusted)
    exclude = list(exclude or ())
    with _Source(
        path, policy=policy, device=device, limits=limits, strict=strict, report=report, verify=verify,
        storage_options=storage_options, progress=progress,
    ) as src:
        folder = (component or "").strip("/")
        _check_component(src, folder)
        obj = _restore_target(src, obj, folder, into)
        if isinstance(obj, dict):
            if strict:
                _check_app_state(src, obj, folder)
            _restore_parts(src, obj, folder, custom_objects=custom_objects, exclude=exclude,
                           exact_match=exact_match, set_data=True)
            return
        _restore_parts(src, obj, folder, custom_objects=custom_objects, exclude=exclude,
                       exact_match=exact_match, set_data=True)


def _check_app_state(src: _Source, app: dict, folder: str) -> None:
    prefix = f"{folder}/" if folder else ""
    saved = {
        n[len(prefix) : -len(_format.PTH_SUFFIX)]
        for n in src.reader.names()
        if n.startswith(prefix) and "/" not in n[len(prefix) :] and n.endswith(_format.PTH_SUFFIX)
    } - {_format.PYTORCH_VARIABLES[: -len(_format.PTH_SUFFIX)]}
    wanted = {k for k, v in app.items() if _is_stateful(v)}
    if saved != wanted:
        raise ParameterMismatchError(
            f"holds stateful entries {sorted(saved)}, but the app state has {sorted(wanted)}.",
            archive=src.name,
            hint="Pass `strict=False` to restore the ones that match.",
        )


def set_parameters_from_archive(
    obj: Any, path: Any, *, exact_match: bool = True, device: Any = "auto", limits: Limits | None = None
) -> None:
    """Load only the state dicts of an archive into ``obj`` (``data`` is never decoded)."""
    with _Source(path, policy=TrustPolicy.make(), device=device, limits=limits) as src:
        _restore_parts(src, obj, "", custom_objects=None, exclude=[], exact_match=exact_match, set_data=False)


def set_parameters_from_dict(obj: Any, params: dict[str, Any], *, exact_match: bool = True) -> None:
    """Load ``{name: state_dict}`` into the matching attributes of ``obj``."""
    expected = _expected_state_names(obj)
    if exact_match and expected is not None and set(params) != set(expected):
        raise ParameterMismatchError(
            f"got state dicts {sorted(params)}, but the object has {sorted(expected)}.",
            hint="Pass `exact_match=False` to load the ones that match.",
        )
    for name, state in params.items():
        try:
            target = _unwrap(_recursive_getattr(obj, name))
        except AttributeError:
            raise ParameterMismatchError(f"`{name}` is not an attribute of {type(obj).__name__}.", key=name) from None
        try:
            if isinstance(target, torch.nn.Module):
                target.load_state_dict(state, strict=exact_match)
            else:
                target.load_state_dict(state)
        except (RuntimeError, ValueError, KeyError) as err:
            raise ParameterMismatchError(f"does not fit: {err}", key=name) from err
