"""What SB3's save and load functions become while zipsave is installed: the same signatures
and documented behaviour, with zipsave's archives and load rules underneath. ``Algo.load`` and
``set_parameters`` rebuild through the one path ``zipsave.load(cls=...)`` takes (``_build``)."""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
from typing import Any

import zipsave
from zipsave import _format
from zipsave._archive import atomic_output
from zipsave._core import LoadOptions, LoadSession, Parts, check_name, encode, pattern_list, write
from zipsave._printable import visible
from zipsave._trust import TrustPolicy, restricted_loads
from zipsave.exceptions import ArchiveNotFoundError, DecodeError

from ._boundary import check_buffer, check_statistics, door
from ._build import build_sb3
from ._checks import check_data, check_names, drop_saved_env
from ._doors import handed, holds_extra, is_address, is_zip, opened, vec_normalize_from_model
from ._extras import EXTRAS
from ._keys import check_custom_objects
from ._params import load_parameters
from ._required import OBJECT_CLASS, OBJECT_VALUE
from ._schedules import rebuilt_on_load
from ._state import Options, original
from ._state import current_options as _current

__all__ = [
    "OBJECT_CLASS",
    "OBJECT_VALUE",
    "algorithm_load",
    "algorithm_save",
    "current_options",
    "is_zipsave_archive",
    "load_from_pkl",
    "load_from_zip_file",
    "save_to_pkl",
    "save_to_zip_file",
    "set_parameters",
    "trusted_names",
    "vec_normalize_load",
    "vec_normalize_save",
    "write_exact",
]


def current_options() -> Options:
    return _current() or Options()


def trusted_names(extra: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    return tuple(current_options().trusted) + tuple(extra)


def _load_options(**call: Any) -> LoadOptions:
    """The options of a load through one of SB3's doors: the installation's trust and strictness
    with the call's own ``device``, ``custom_objects`` and ``print_system_info``."""
    options = current_options()
    return LoadOptions(
        allow_pickle=options.allow_pickle,
        trusted=options.trusted,
        strict=options.strict,
        limits=options.limits,
        trust=options.trust,
        **call,
    )


# -- BaseAlgorithm (save_util functions) -----------------------------------------------------
def save_to_zip_file(
    save_path: Any,
    data: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
    pytorch_variables: dict[str, Any] | None = None,
    verbose: int = 0,
) -> None:
    """SB3's ``save_to_zip_file``: an atomic zipsave archive (``.zip`` added to a path
    without a suffix, parent folders created, file objects written and left open)."""
    del verbose
    # zipsave.save_archive, knowing that SB3's schedule closures are rebuilt on load (no warning)
    parts = Parts(
        dict(data or {}),
        list((params or {}).items()),
        dict(pytorch_variables or {}),
        [],
        rebuilt_on_load=rebuilt_on_load,
    )
    write(encode(parts, "", exclude=None, include=None), save_path)


def load_from_zip_file(
    load_path: Any,
    load_data: bool = True,
    custom_objects: dict[str, Any] | None = None,
    device: Any = "auto",
    verbose: int = 0,
    print_system_info: bool = False,
) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any] | None]:
    """SB3's ``load_from_zip_file`` with :func:`zipsave.load_archive`'s rules (what
    sb3-contrib's ``ARS.set_parameters`` and other code calling it by name get)."""
    del verbose
    options = current_options()
    _check_exists(load_path, "zip")
    _check_custom_objects(custom_objects)
    loaded = zipsave.load_archive(
        load_path,
        load_data=load_data,
        custom_objects=custom_objects,
        device=device,
        print_system_info=print_system_info,
        allow_pickle=options.allow_pickle,
        trusted=trusted_names(),
        strict=options.strict,
        limits=options.limits,
        trust=options.trust,
    )
    data, params, variables = loaded
    # Code calling this follows these names with getattr/setattr and calls the classes in
    # `data` (as SB3's own `load` does): checked here, before they reach it.
    check_names(None, data=data, params=params, variables=variables, archive=load_path)
    if data is not None:
        drop_saved_env(data)
        check_data(data, archive=load_path)
    return loaded


def _check_custom_objects(custom_objects: Any) -> None:
    """zipsave's check of ``custom_objects``, raising what SB3's ``json_to_data`` raises for a
    value that is not a dict: a ``ValueError`` (``zipsave.load`` raises a ``TypeError``)."""
    try:
        check_custom_objects(custom_objects)
    except TypeError as err:
        raise ValueError(str(err)) from None


_LOAD_KEYWORDS = ("env", "device", "custom_objects", "print_system_info", "force_reset")


def algorithm_load(cls: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
    """``BaseAlgorithm.load``: the model rebuilt through the one path of
    ``zipsave.load(path, cls=cls)`` (the same table of required keys, the same messages), with
    the installation's trust rules; the archive's replay buffer and ``VecNormalize``
    statistics restored (the ``env`` wrapped before the model is built, the buffer filled
    after); a value the caller passed that the model cannot be built with named in the error."""
    if len(args) > len(_LOAD_KEYWORDS):  # SB3's positional order: env, device, custom_objects, ...
        raise TypeError(f"{cls.__name__}.load() takes at most {len(_LOAD_KEYWORDS) + 1} positional arguments.")
    kwargs.update(zip(_LOAD_KEYWORDS, args))
    device = kwargs.pop("device", "auto")
    custom_objects = kwargs.pop("custom_objects", None)
    print_system_info = bool(kwargs.pop("print_system_info", False))
    _check_custom_objects(custom_objects)
    _check_exists(path, "zip")
    options = _load_options(device=device, print_system_info=print_system_info)
    with door(path, f"{cls.__name__}.load"), LoadSession(_existing(path, "zip"), options) as src:
        return build_sb3(
            src,
            cls,
            custom_objects=dict(custom_objects) if custom_objects is not None else None,
            exclude=[],
            overrides=kwargs,
            door=f"{cls.__name__}.load",
        )


def set_parameters(self: Any, load_path_or_dict: Any, exact_match: bool = True, device: Any = "auto") -> None:
    """``BaseAlgorithm.set_parameters``: a dict goes to SB3's own; an archive is read straight
    into the model's modules and optimizers by the one rebuild path (its names checked
    against the model, SB3's shims for archives of older versions applied). ``data`` is never
    decoded."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    if isinstance(load_path_or_dict, dict):
        return original(BaseAlgorithm, "set_parameters")(self, load_path_or_dict, exact_match, device)
    _check_exists(load_path_or_dict, "zip")
    with (
        door(load_path_or_dict, f"{type(self).__name__}.set_parameters"),
        LoadSession(_existing(load_path_or_dict, "zip"), _load_options(device=device)) as src,
    ):
        load_parameters(src, self, [], exact_match=exact_match)
    return None


def algorithm_save(self: Any, path: Any, exclude: Any = None, include: Any = None) -> None:
    """``BaseAlgorithm.save``: SB3's own, except that the extras SB3 would pickle whole into
    ``data`` (``include=["replay_buffer"]``: its arrays as base64 of a pickle) are written as
    zipsave writes them, arrays in ``.npy`` members of the ``replay_buffer/`` folder, as
    ``zipsave.save(model, path, include=[...])`` does. SB3's own ``load`` ignores the folder
    (the model loads without its buffer); zipsave's doors restore it."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    if not any(name in EXTRAS for name in pattern_list(include, "include")):
        return original(BaseAlgorithm, "save")(self, path, exclude, include)
    zipsave.save(self, path, exclude=exclude, include=include)
    return None


def _existing(path: Any, suffix: str) -> Any:
    """The path SB3 would open: ``path``, else ``path.<suffix>``."""
    if hasattr(path, "read") or is_address(path) or os.path.exists(path):
        return path
    return f"{os.fspath(path)}.{suffix}"


def _check_exists(path: Any, suffix: str) -> None:
    """SB3 raises ``FileNotFoundError`` for a missing path (after trying the suffix); so does
    :class:`ArchiveNotFoundError`, which names the archive as ``zipsave.load`` does."""
    if hasattr(path, "read") or is_address(path):
        return
    text = os.fspath(path)
    if not os.path.exists(text) and not os.path.exists(f"{text}.{suffix}"):
        raise ArchiveNotFoundError(
            f"no such file (also tried `{visible(f'{text}.{suffix}')}`).",
            archive=text,
            errno=errno.ENOENT,
            hint="Check the path, or pass an open binary file object.",
        )


# -- replay buffers and VecNormalize (object archives) ---------------------------------------
def _with_suffix(path: Any, suffix: str) -> Any:
    """SB3's ``open_path`` rule: a path without a suffix gets ``.<suffix>``."""
    if hasattr(path, "write") or hasattr(path, "read"):
        return path
    p = pathlib.Path(path)
    return p.with_suffix(f".{suffix}") if p.suffix == "" else p


def write_exact(path: Any, data: dict[str, Any], params: dict[str, Any] | None = None) -> None:
    """An atomic archive at exactly ``path`` (SB3 names these files, not zipsave)."""
    if hasattr(path, "write"):
        zipsave.save_archive(path, data=data, params=params)
        return
    with atomic_output(os.fspath(path)) as fp:
        zipsave.save_archive(fp, data=data, params=params)


def save_object(path: Any, obj: Any) -> None:
    """Write ``obj``'s pickle state (``__getstate__``) as a zipsave archive: arrays as ``.npy``
    members, spaces and plain values readable, nothing that needs code to load."""
    state = obj.__getstate__() if hasattr(obj, "__dict__") else None
    if isinstance(state, dict) and all(isinstance(key, str) for key in state):
        write_exact(path, {OBJECT_CLASS: type(obj), **state})
    else:  # a plain value (SB3's save_to_pkl takes anything): one entry, encoded as it is
        write_exact(path, {OBJECT_VALUE: obj})


def is_zipsave_archive(path: Any) -> bool:
    return is_zip(path)


def _unsigned_pickle(path: Any, options: Any) -> None:
    """A pickle SB3 wrote cannot carry a signature: refused when a signature is required."""
    if options.trust is not None and options.trust.required:
        raise zipsave.SignatureError(
            "is a plain pickle, not a zipsave archive, so it cannot be signed, and the trust setting requires a "
            "signature.",
            reason="no-signature",
            archive=path,
            hint="Save it again with zipsave installed (an archive), then sign it with `zipsave sign`.",
        )


def load_object(path: Any, expected: type, what: str, *, src: LoadSession | None = None) -> Any:
    """Rebuild an object written by :func:`save_object`, or read a pickle SB3 wrote under the
    same trust rules as a ``data`` value. The object's class must be trusted and be an
    ``expected``; a value that does not decode is an error, never a partial object. ``src``:
    the session a door opened on ``path`` (its zip directory read once), else it opens one."""
    options = current_options()
    src = src or handed(path)
    if src is None and not is_address(path) and not is_zipsave_archive(path):
        _unsigned_pickle(path, options)
        # streamed from the file: each array is read straight into the array the pickle builds
        policy = TrustPolicy.make(allow_pickle=options.allow_pickle, trusted=trusted_names())
        with contextlib.nullcontext(path) if hasattr(path, "read") else open(path, "rb") as fp:
            obj = restricted_loads(fp, policy, archive=path, limits=options.limits)
    else:
        if src is None:
            checked = LoadOptions(
                allow_pickle=options.allow_pickle,
                trusted=trusted_names(),
                strict=True,
                limits=options.limits,
                trust=options.trust,
            )
            src = LoadSession(path, checked)
        with src:  # one open: `data` is read once, checked, then decoded
            _check_object_archive(src, what)
            data = dict(src.decode_data("") or {})
        if OBJECT_VALUE in data:
            return _checked(data[OBJECT_VALUE], expected, what, path)
        cls: Any = data.pop(OBJECT_CLASS, None)
        if not isinstance(cls, type):
            raise zipsave.ArchiveFormatError(
                f"holds no `{OBJECT_CLASS}`, so it is not a {what} saved by zipsave.", archive=path
            )
        if not issubclass(cls, expected):
            raise DecodeError(f"holds a {cls.__name__}, expected a {what} ({expected.__name__}).", archive=path)
        for key in data:  # the object's own attributes: never a dunder (`__deepcopy__`) nor zipsave's
            check_name(key, path=str(key), archive=path, member="data", key=str(key))
        obj = _rebuilt(cls, data, path)
    return _checked(obj, expected, what, path)


def _rebuilt(cls: type, state: dict[str, Any], path: Any) -> Any:
    """An instance of ``cls`` with ``state`` set as pickle sets it (NEWOBJ, then BUILD). The
    class and the state are the archive's: what the class's own code raises on them (a
    ``Box`` without ``low``, a ``VecNormalize`` without ``observation_space``, a class that
    needs constructor arguments) is a :class:`DecodeError` naming the archive, never the
    class's own exception."""
    try:
        new: Any = cls.__new__
        obj = new(cls)
        if hasattr(obj, "__setstate__"):
            obj.__setstate__(state)
        else:
            obj.__dict__.update(state)
    except Exception as err:  # noqa: BLE001 - the class's own code on the archive's values
        if isinstance(err, MemoryError):
            raise
        raise DecodeError(
            f"holds a {visible(cls.__name__)} that its saved attributes do not rebuild "
            f"({type(err).__name__}: {visible(str(err)[:200])}).",
            archive=path,
            member=_format.DATA,
            key=OBJECT_CLASS,
            hint="It was not written by `save_replay_buffer` or `VecNormalize.save` as it is (damaged, or made to "
            "break readers).",
        ) from err
    return obj


#: What each object door reads: ``(the folder of a model archive, the file's name, how to write one)``.
_OBJECT_FILES = {
    "VecNormalize": (
        "vec_normalize",
        "VecNormalize",
        "`vec_env.save(path)` or `zipsave.save(model, path, include=['vec_normalize'])`",
    ),
    "saved object": (
        "replay_buffer",
        "replay buffer",
        "`model.save_replay_buffer(path)` or `model.save(path, include=['replay_buffer'])`",
    ),
}


def _check_object_archive(src: LoadSession, what: str) -> None:
    """A zip that is not a file ``save_object`` wrote (most often a model archive saved without
    the extra) is named as such before any value is decoded (the decode reuses what is read)."""
    raw = src.read_json(_format.DATA) if src.has(_format.DATA) else {}
    keys = set(raw) if isinstance(raw, dict) else set()
    if OBJECT_CLASS in keys or OBJECT_VALUE in keys:
        return
    folder, noun, how = _OBJECT_FILES.get(what, ("replay_buffer", what, "SB3's own save"))
    if "policy_class" in keys:
        found = f"holds a model (its `data` names a `policy_class`) without a `{folder}/` folder"
    else:
        found = f"has no `{OBJECT_CLASS}` in its `data` and no `{folder}/` folder"
    raise zipsave.ArchiveFormatError(
        f"{found}: it is not a {noun} file.",
        archive=src.name,
        member=_format.DATA,
        hint=f"Pass a file written by {how} (under `zipsave.sb3.install()`), or SB3's pickle of one.",
    )


def _checked(obj: Any, expected: type, what: str, path: Any) -> Any:
    if not isinstance(obj, expected):
        raise DecodeError(f"holds a {type(obj).__name__}, expected a {what} ({expected.__name__}).", archive=path)
    return obj


def save_to_pkl(path: Any, obj: Any, verbose: int = 0) -> None:
    """SB3's ``save_to_pkl`` (``save_replay_buffer``): ``.pkl`` added to a path without a
    suffix, parent folders created; the file is a zipsave archive instead of a pickle."""
    del verbose
    path = _with_suffix(path, "pkl")
    if not hasattr(path, "write"):
        path.parent.mkdir(parents=True, exist_ok=True)
    save_object(path, obj)


def load_from_pkl(path: Any, verbose: int = 0) -> Any:
    """SB3's ``load_from_pkl`` (``load_replay_buffer``): the path, else the path + ``.pkl``."""
    del verbose
    if not hasattr(path, "read") and not is_address(path) and not os.path.exists(path):
        _check_exists(path, "pkl")
        path = f"{os.fspath(path)}.pkl"
    # SB3's function, called by name (save_util.load_from_pkl) as well as by its
    # load_replay_buffer: the boundary of a door, so nothing but a ZipsaveError leaves it
    with door(path, "load_from_pkl"):
        obj = load_object(path, object, "saved object")
        if any(cls.__name__ == "BaseBuffer" for cls in type(obj).__mro__):  # SB3's buffers, without importing them
            check_buffer(obj, path)
    return obj


def vec_normalize_save(self: Any, save_path: Any) -> None:
    """``VecNormalize.save``: its statistics and settings, at exactly ``save_path``."""
    save_object(save_path, self)


def vec_normalize_load(load_path: Any, venv: Any) -> Any:
    """``VecNormalize.load``: the saved wrapper around ``venv``."""
    from stable_baselines3.common.vec_env import VecNormalize

    # the door's boundary holds the open too: what opening a URL raises is a ZipsaveError as well
    with door(load_path, "VecNormalize.load"), opened(load_path) as src:
        if src is not None and holds_extra(src, "vec_normalize"):  # a model archive (or checkpoint) that holds one
            return vec_normalize_from_model(src, venv)
        vec_normalize = load_object(load_path, VecNormalize, "VecNormalize", src=src)
        check_statistics(vec_normalize, load_path)
        vec_normalize.set_venv(venv)
    return vec_normalize
