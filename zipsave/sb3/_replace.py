"""What SB3's save and load functions become while zipsave is installed: the same signatures
and documented behaviour, with zipsave's archives and load rules underneath."""

from __future__ import annotations

import contextvars
import dataclasses
import os
import pathlib
from typing import Any

import zipsave
from zipsave._archive import atomic_output
from zipsave._core import check_name, resolve
from zipsave._trust import BY_VALUE_MARK, TrustPolicy, restricted_loads
from zipsave.exceptions import DecodeError, ParameterMismatchError

from ._state import Options, original
from ._state import current_options as _current
from ._build import ARS_WEIGHTS, is_ars, sync_ars_weights
from ._checks import check_data, check_names, drop_saved_env
from ._schedules import closures_in
from ._doors import holds_extra, is_zip, restore_replay_buffer_after_load, vec_normalize_from_model, wrap_env_for_load
from ._keys import blame_given, check_custom_objects, given_values, warn_unknown_keys, warn_unmatched_custom_objects
from ._zoo import read_data, schedules_in

__all__ = [
    "algorithm_load",
    "current_options",
    "is_zipsave_archive",
    "load_from_pkl",
    "load_from_zip_file",
    "save_to_pkl",
    "save_to_zip_file",
    "vec_normalize_load",
    "trusted_names",
    "vec_normalize_save",
    "write_exact",
]

#: The ``Algo.load`` call running in this context (see :class:`_Call`).
_loading: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("zipsave_sb3_loading", default=None)


@dataclasses.dataclass
class _Call:
    """One ``Algo.load``: the class, whether it asked for the system info, the ``data`` keys
    its caller passed as keyword arguments (those win over the saved values); and, filled by
    ``load_from_zip_file``, the ``data`` it returned and the archive's raw ``data`` JSON."""

    cls: type
    asked: bool
    given: frozenset[str]
    data: dict[str, Any] | None = None
    raw: dict[str, Any] | None = None
#: ``data`` keys without which ``BaseAlgorithm.load`` cannot build the model it saved.
_REQUIRED = ("policy_class", "observation_space", "action_space", "policy_kwargs")
#: Keywords of ``BaseAlgorithm.load`` that are not ``data`` keys.
_LOAD_KEYWORDS = frozenset({"env", "device", "custom_objects", "print_system_info", "force_reset"})

#: ``data`` key naming the class of an object archive (replay buffer, ``VecNormalize``).
OBJECT_CLASS = "_zipsave_object_class"
#: ``data`` key of an object archive holding one plain value instead of attributes.
OBJECT_VALUE = "_zipsave_object_value"


def current_options() -> Options:
    return _current() or Options()


def trusted_names(extra: tuple[Any, ...] = ()) -> tuple[Any, ...]:
    return tuple(current_options().trusted) + tuple(extra)


def _named_classes(cls: type | None) -> tuple[type, ...]:
    """Classes the caller named by calling ``cls.load``: ``cls``'s own policies. SB3 builds
    one of them from the archive anyway, so trusting their names adds no reach."""
    aliases = getattr(cls, "policy_aliases", None) or {}
    return tuple(p for p in aliases.values() if isinstance(p, type))


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
    zipsave.save_archive(save_path, data=data, params=params, pytorch_variables=pytorch_variables)


def load_from_zip_file(
    load_path: Any,
    load_data: bool = True,
    custom_objects: dict[str, Any] | None = None,
    device: Any = "auto",
    verbose: int = 0,
    print_system_info: bool = False,
) -> tuple[dict[str, Any] | None, dict[str, Any], dict[str, Any] | None]:
    """SB3's ``load_from_zip_file`` with :func:`zipsave.load_archive`'s rules."""
    del verbose
    loading = _loading.get()
    cls: type | None = loading.cls if loading is not None else _calling_algorithm()
    asked, given = (loading.asked, loading.given) if loading is not None else (False, frozenset())
    model = None if loading is not None else _calling_model()
    options = current_options()
    _check_exists(load_path, "zip")
    if options.trust is not None:  # before `data` is read for schedule closures below
        zipsave.verify_signature(_existing(load_path, "zip"), options.trust)
    check_custom_objects(custom_objects)
    raw = read_data(_existing(load_path, "zip")) if load_data and loading is not None else None
    if load_data and not options.allow_pickle:
        # SB3's and the RL Zoo's own schedule closures (SB3/rl-zoo3 < 2.7, or a closure a user
        # passed), rebuilt without running them.
        raw = raw if raw is not None else read_data(_existing(load_path, "zip"))
        skip = custom_objects or {}
        found = {**closures_in(raw, skip), **schedules_in(raw, skip)}
        if found:
            custom_objects = {**found, **(custom_objects or {})}
    report = zipsave.LoadReport()
    loaded = zipsave.load_archive(
        load_path,
        load_data=load_data,
        custom_objects=custom_objects,
        device=device,
        print_system_info=print_system_info or asked,
        allow_pickle=options.allow_pickle,
        trusted=trusted_names(_named_classes(cls)),
        strict=options.strict,
        report=report,
        trust=options.trust,
    )
    if loading is not None and load_data:
        if loaded[0] is None:  # a plain torch.save file, or an archive without `data`: no model
            raise zipsave.ArchiveFormatError(
                "has no `data` member, so it holds no model (not a zipsave or SB3 model archive?).",
                archive=load_path,
                hint=f"Load its weights into a model with `model.set_parameters(path)`, or read its tensors "
                f"with `zipsave.load_archive(path)`; {loading.cls.__name__}.load needs an archive `model.save` wrote.",
            )
        _check_required(load_path, loading.cls, report, given | set(custom_objects or ()))
        _check_is_model(load_path, loading.cls, loaded[0], given | set(custom_objects or ()))
        loading.data, loading.raw = loaded[0], raw if isinstance(raw, dict) else None
    data, params, variables = loaded
    # SB3's own `load`/`set_parameters` follow these names with getattr/setattr and call the
    # classes in `data`: checked here, before they reach SB3's code.
    check_names(cls, data=data, params=params, variables=variables, archive=load_path)
    for name in (params or {}) if model is not None else ():  # `set_parameters`: walked in the live model
        try:
            resolve(model, name, archive=load_path, member=f"{name}.pth")
        except AttributeError as err:
            raise ParameterMismatchError(
                f"`{name}` is not an attribute of {type(model).__name__} ({err}).", archive=load_path, member=f"{name}.pth"
            ) from None
    if data is not None:
        drop_saved_env(data, report.notes)
        check_data(data, archive=load_path)
    return loaded


def _check_required(path: Any, cls: type, report: Any, given: Any) -> None:
    """``BaseAlgorithm.load`` cannot rebuild the saved model without these keys: it would fail
    later with ``KeyError`` (SB3 #1682) or, for ``policy_kwargs``, build default layers that the
    saved weights do not fit. Name the key and its cause now."""
    skipped = {e.key: e for e in report.skipped if e.member == "data" and e.key in _REQUIRED and e.key not in given}
    if not skipped:
        return
    lost = sorted(skipped)
    causes = "; ".join(f"`{key}`: {skipped[key].cause}" for key in lost)
    raise DecodeError(
        f"cannot build {cls.__name__}: {', '.join(f'`{k}`' for k in lost)} could not be decoded and "
        f"{cls.__name__}.load needs {'it' if len(lost) == 1 else 'them'} ({causes})",
        archive=path,
        member="data",
        key=lost[0] if len(lost) == 1 else None,
        hint=f"Provide the value with `{cls.__name__}.load(path, custom_objects={{"
        + ", ".join(f"{k!r}: ..." for k in lost) + "})`"
        + ("" if any(BY_VALUE_MARK in skipped[k].cause for k in lost) else
           ", trust the global named above with `zipsave.sb3.install(trusted=[...])`")
        + ", or, if you trust the archive completely, `zipsave.sb3.install(allow_pickle=True)`.",
    )


def _calling_model() -> Any:
    """The SB3 model whose ``set_parameters`` calls ``load_from_zip_file``, or ``None``."""
    import sys

    from stable_baselines3.common.base_class import BaseAlgorithm

    owner = sys._getframe(2).f_locals.get("self")
    return owner if isinstance(owner, BaseAlgorithm) else None


def _check_is_model(path: Any, cls: type, data: dict[str, Any], given: Any) -> None:
    """``data`` without the keys every SB3 model has (and nothing skipped them): a buffer or
    ``VecNormalize`` file, or another archive; SB3 would raise ``KeyError: 'policy_class'``."""
    if "policy_class" in data or "policy_class" in given:
        return
    missing = [key for key in ("policy_class", "observation_space", "action_space") if key not in data]
    if OBJECT_CLASS in data or OBJECT_VALUE in data:
        what = "a replay buffer or VecNormalize saved on its own (`save_replay_buffer`, `VecNormalize.save`)"
        hint = "Read it with `model.load_replay_buffer(path)` or `VecNormalize.load(path, venv)`."
    else:
        what = "no SB3 model"
        hint = f"{cls.__name__}.load reads what `model.save` wrote; `zipsave.load(path)` reads other archives."
    raise zipsave.ArchiveFormatError(
        f"holds {what}: its `data` has no {', '.join(f'`{k}`' for k in missing)}.",
        archive=path,
        member="data",
        hint=hint,
    )


def _calling_algorithm() -> type | None:
    """The algorithm class of the SB3 method calling ``load_from_zip_file`` (``set_parameters``
    of SB3 and sb3-contrib's ARS, which loads ``data`` too): its own policies are trusted."""
    import sys

    from stable_baselines3.common.base_class import BaseAlgorithm

    caller = sys._getframe(2).f_locals
    owner = caller.get("self", caller.get("cls"))
    if isinstance(owner, BaseAlgorithm):
        return type(owner)
    return owner if isinstance(owner, type) and issubclass(owner, BaseAlgorithm) else None


def algorithm_load(cls: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
    """``BaseAlgorithm.load``: SB3's own, with ``cls`` known to the archive reader; the
    archive's replay buffer and ``VecNormalize`` statistics restored as ``zipsave.load``
    restores them (the ``env`` wrapped before SB3 builds the model, the buffer filled after);
    a value the caller passed that the model cannot be built with named in the error."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    if args:  # SB3's positional order: env, device, custom_objects, print_system_info, ...
        names = ("env", "device", "custom_objects", "print_system_info", "force_reset")
        kwargs.update(zip(names, args))
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__}.load() takes at most {len(names) + 1} positional arguments.")
    # zipsave prints the saved and current system info and their differences in one place.
    asked = bool(kwargs.pop("print_system_info", False))
    check_custom_objects(kwargs.get("custom_objects"))
    caller_objects = dict(kwargs.get("custom_objects") or {})
    if is_ars(cls):  # its pickled `weights` are replaced from the loaded policy below, not decoded
        kwargs["custom_objects"] = {ARS_WEIGHTS: None, **(kwargs.get("custom_objects") or {})}
    archive = _existing(path, "zip")
    if holds_extra(archive, "vec_normalize"):
        kwargs["env"] = wrap_env_for_load(cls, archive, kwargs.get("env"))
    call = _Call(cls, asked, frozenset(kwargs) - _LOAD_KEYWORDS)
    token = _loading.set(call)
    try:
        model = original(BaseAlgorithm, "load").__func__(cls, path, **kwargs)
    except zipsave.ZipsaveError:
        raise
    except (AssertionError, KeyError, IndexError, AttributeError, TypeError, ValueError, RuntimeError) as err:
        given = given_values(caller_objects, {k: kwargs[k] for k in call.given})
        blamed = blame_given(cls, err, given, call.raw, path) if given and call.data is not None else None
        if blamed is not None:
            raise blamed from err
        # SB3's asserts and KeyErrors on an archive it cannot build from
        raise DecodeError(
            f"{cls.__name__}.load cannot build the model from this archive ({type(err).__name__}: {err}).",
            archive=path if isinstance(path, (str, os.PathLike)) else None,
            hint="Check that the archive holds a model of this algorithm and that `env=` matches its spaces.",
        ) from err
    finally:
        _loading.reset(token)
    if is_ars(cls):
        sync_ars_weights(model)
    if call.data is not None:
        warn_unmatched_custom_objects(caller_objects, call.data, path)
        warn_unknown_keys(model, call.data, path, given=call.given | set(caller_objects))
    if holds_extra(archive, "replay_buffer"):
        restore_replay_buffer_after_load(model, archive)
    return model


def _existing(path: Any, suffix: str) -> Any:
    """The path SB3 would open: ``path``, else ``path.<suffix>``."""
    if hasattr(path, "read") or (isinstance(path, str) and "://" in path) or os.path.exists(path):
        return path
    return f"{os.fspath(path)}.{suffix}"


def _check_exists(path: Any, suffix: str) -> None:
    """SB3 raises ``FileNotFoundError`` for a missing path (after trying the suffix)."""
    if hasattr(path, "read") or (isinstance(path, str) and "://" in path):
        return
    text = os.fspath(path)
    if not os.path.exists(text) and not os.path.exists(f"{text}.{suffix}"):
        raise FileNotFoundError(f"no such file: {text!r} (also tried {text}.{suffix}).")


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
            "signature.", reason="no-signature", archive=path,
            hint="Save it again with zipsave installed (an archive), then sign it with `zipsave sign`.",
        )


def load_object(path: Any, expected: type, what: str) -> Any:
    """Rebuild an object written by :func:`save_object`, or read a pickle SB3 wrote under the
    same trust rules as a ``data`` value. The object's class must be trusted and be an
    ``expected``; a value that does not decode is an error, never a partial object."""
    options = current_options()
    if not is_zipsave_archive(path):
        _unsigned_pickle(path, options)
        payload = path.read() if hasattr(path, "read") else pathlib.Path(path).read_bytes()
        policy = TrustPolicy.make(allow_pickle=options.allow_pickle, trusted=trusted_names())
        obj = restricted_loads(payload, policy, archive=path)
    else:
        data, _, _ = zipsave.load_archive(
            path, allow_pickle=options.allow_pickle, trusted=trusted_names(), strict=True, trust=options.trust
        )
        data = dict(data or {})
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
        new: Any = cls.__new__  # what pickle does (NEWOBJ), then the state below
        obj = new(cls)
        if hasattr(obj, "__setstate__"):
            obj.__setstate__(data)
        else:
            obj.__dict__.update(data)
    return _checked(obj, expected, what, path)


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
    if not hasattr(path, "read") and not os.path.exists(path):
        _check_exists(path, "pkl")
        path = f"{os.fspath(path)}.pkl"
    return load_object(path, object, "saved object")


def vec_normalize_save(self: Any, save_path: Any) -> None:
    """``VecNormalize.save``: its statistics and settings, at exactly ``save_path``."""
    save_object(save_path, self)


def vec_normalize_load(load_path: Any, venv: Any) -> Any:
    """``VecNormalize.load``: the saved wrapper around ``venv``."""
    from stable_baselines3.common.vec_env import VecNormalize

    if holds_extra(load_path, "vec_normalize"):  # a model archive (or checkpoint) that holds one
        return vec_normalize_from_model(load_path, venv)
    vec_normalize = load_object(load_path, VecNormalize, "VecNormalize")
    vec_normalize.set_venv(venv)
    return vec_normalize
