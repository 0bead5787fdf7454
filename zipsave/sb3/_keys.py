"""What an SB3 load says about the ``data`` keys and the values its caller passed: a saved key
no part of the algorithm knows (a hand-edited ``"gmma"``), a ``custom_objects`` key that
matches no saved key, and a value of the caller's that the algorithm cannot be built with.
SB3 is silent on the first two and blames the archive for the third."""

from __future__ import annotations

import difflib
import re
import types
import warnings
from collections.abc import Mapping
from typing import Any

from .._core import LoadOptions, check_custom_objects
from .._printable import shown, visible
from ..exceptions import DecodeError, ZipsaveWarning, caller_stacklevel, describe_path

__all__ = [
    "blame_given",
    "check_custom_objects",
    "given_values",
    "warn_near_options",
    "warn_unknown_keys",
    "warn_unmatched_custom_objects",
]

#: ``data`` keys ``BaseAlgorithm.load`` itself reads (not attributes of a freshly built model).
_READ_BY_LOAD = frozenset({"observation_space", "action_space", "n_envs", "policy_class", "env"})
#: Attributes that older SB3 versions set and saved (SB3 1.x: ``_last_dones``): no misspelling.
_SAVED_BY_OLDER_SB3 = frozenset({"_last_dones"})
_ABSENT = object()
#: The keywords of SB3's ``BaseAlgorithm.load``, and how else people spell them.
SB3_LOAD_OPTIONS = ("env", "device", "custom_objects", "print_system_info", "force_reset")
_SPELLED = {"environment": "env", "envs": "env", "venv": "env"}


def _close(key: str, keys: Any, cutoff: float = 0.6) -> str:
    found = difflib.get_close_matches(key, sorted(keys), n=1, cutoff=cutoff)
    return f" (did you mean `{found[0]}`?)" if found else ""


def warn_unmatched_custom_objects(custom_objects: Mapping[str, Any] | None, data_keys: Any, archive: Any) -> None:
    """One warning per ``custom_objects`` key that is no key of the archive's ``data``: such a
    value is used nowhere (SB3 drops it silently)."""
    keys = set(data_keys)
    for key in sorted(k for k in (custom_objects or {}) if k not in keys):
        warnings.warn(
            ZipsaveWarning(
                f"archive `{describe_path(archive)}`: custom_objects[{key!r}] matches no key of the archive's "
                f"`data`, so it was not used{_close(key, keys)}. Only saved keys are replaced; set any other "
                "attribute on the loaded model."
            ),
            stacklevel=caller_stacklevel(),
        )


def _code_names(code: types.CodeType, out: set[str]) -> None:
    out.update(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_names(const, out)


def _known_names(cls: type) -> set[str]:
    """Every name the code of ``cls`` and its bases uses (``self.gamma = ...`` puts ``gamma``
    there): an attribute the class sets or reads, however it sets it."""
    names = set(_READ_BY_LOAD | _SAVED_BY_OLDER_SB3)
    for klass in cls.__mro__[:-1]:
        for value in vars(klass).values():
            function = getattr(value, "__func__", value)
            function = getattr(function, "fget", function)  # a property's getter
            code = getattr(function, "__code__", None)
            if isinstance(code, types.CodeType):
                _code_names(code, names)
    return names


#: Unknown ``data`` keys looked at for a misspelling, and warned about one by one: a hand-edited
#: archive has a few; 200 000 (a 3.6 MB ``data``) took 28 s to compare with every known name.
_SPELLING_CHECKS = 256
_SPELLING_WARNINGS = 8


def warn_unknown_keys(model: Any, data: Mapping[str, Any], archive: Any, *, given: Any = ()) -> None:
    """One warning per ``data`` key that looks like a misspelt one: no code of the model's
    class uses the name, and it is close to one that does (``"gmma"``). Any other unknown key
    is taken as an attribute the user set on the model and saved on purpose
    (``model.notes = ...``), and loads silently. The first :data:`_SPELLING_CHECKS` unknown
    keys are looked at, and the first :data:`_SPELLING_WARNINGS` close ones named one by one."""
    known = _known_names(type(model))
    attributes = vars(model)
    candidates = [k for k in known if k in attributes]
    unknown = sorted(k for k in data if k not in known and k not in given)
    near = [(key, close) for key in unknown[:_SPELLING_CHECKS] if (close := _close(key, candidates, 0.75))]
    for key, close in near[:_SPELLING_WARNINGS]:
        warnings.warn(
            ZipsaveWarning(
                f"archive `{describe_path(archive)}`: `data` holds `{key}`, which {type(model).__name__} neither "
                f"takes nor sets{close}; it was set as an attribute that nothing in {type(model).__name__} reads "
                "(edited by hand, or saved by another class or version?)."
            ),
            stacklevel=caller_stacklevel(),
        )
    if len(near) > _SPELLING_WARNINGS:
        looked = f" among the first {_SPELLING_CHECKS} unknown ones" if len(unknown) > _SPELLING_CHECKS else ""
        warnings.warn(
            ZipsaveWarning(
                f"archive `{describe_path(archive)}`: `data` holds {len(near) - _SPELLING_WARNINGS} more keys{looked} "
                f"close to names {type(model).__name__} uses; each was set as an attribute that nothing reads."
            ),
            stacklevel=caller_stacklevel(),
        )


def _zipsave_options() -> tuple[str, ...]:
    """The options of ``zipsave.load`` (its own and the shared load options)."""
    return ("cls", "component", "exclude", "exact_match", *LoadOptions.DEFAULTS)


def warn_near_options(
    keywords: Mapping[str, Any], data: Mapping[str, Any], cls: type, archive: Any, *, door: str
) -> None:
    """One warning per keyword that looks like a misspelt option of the load (``mmpa=True`` for
    ``mmap``, ``enviroment=`` for ``env``): SB3 sets every keyword it does not know as an
    attribute of the model, silently; zipsave still does, and says so. A keyword that is a saved
    ``data`` key or a name the algorithm's code uses (``verbose``, ``gamma``) is never one."""
    options = SB3_LOAD_OPTIONS if door != "zipsave.load" else (*_zipsave_options(), "env", "force_reset")
    spellings = {**{name: name for name in options}, **{k: v for k, v in _SPELLED.items() if v in options}}
    known: set[str] | None = None
    for key in sorted(k for k in keywords if k not in data and k not in spellings):
        found = difflib.get_close_matches(key, sorted(spellings), n=1, cutoff=0.75)
        if not found:
            continue
        known = _known_names(cls) if known is None else known
        if key in known:
            continue
        option = spellings[found[0]]
        warnings.warn(
            ZipsaveWarning(
                f"archive `{describe_path(archive)}`: `{key}=` is not an option of {door} (did you mean `{option}`?); "
                f"it was set as the attribute `model.{key}`, as SB3 does with every keyword it does not know."
            ),
            stacklevel=caller_stacklevel(),
        )


def given_values(custom_objects: Mapping[str, Any] | None, keywords: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """The values the caller passed for ``data`` keys, by key: (how the caller named it, value)."""
    out = {key: (f"{key}=", value) for key, value in keywords.items()}
    out.update({key: (f"custom_objects[{key!r}]", value) for key, value in (custom_objects or {}).items()})
    return out


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "object" if ":type:" in value or ":serialized:" in value else "dict"
    return "object"


def _held(saved: Any) -> str:
    """What a saved value is, as ``data`` names it: its kind, the class a reference names, or
    the class of an encoded object (SB3's ``":type:"`` hint)."""
    kind = _kind(saved)
    if kind != "object" or not isinstance(saved, dict):
        return f"a {kind}"
    native, hint = saved.get(":zipsave:"), saved.get(":type:")
    if isinstance(native, dict) and native.get("kind") == "ref" and isinstance(native.get("path"), str):
        return f"the class `{visible(native['path'])}`"
    match = re.fullmatch(r"<class '([\w.]+)'>", hint) if isinstance(hint, str) else None
    if match is None or match[1] in ("type", "abc.ABCMeta"):
        return "an object"
    return f"a `{visible(match[1])}`"


def blame_given(
    cls: type, err: BaseException, given: Mapping[str, tuple[str, Any]], raw: Mapping[str, Any] | None, archive: Any
) -> DecodeError | None:
    """The error naming the caller's value that ``cls`` could not be built with, or ``None``
    when no given value is to blame: one whose text the error quotes, or a plain value
    (text, flag, list) of another kind than the saved one."""
    text = str(err)
    suspects = []
    for key, (label, value) in given.items():
        quoted = (
            isinstance(value, (str, int, float))
            and not isinstance(value, bool)
            and len(str(value)) >= 2
            and str(value) in text
        )
        saved = (raw or {}).get(key, _ABSENT)
        other_kind = (
            saved is not _ABSENT
            and _kind(value) in ("str", "bool", "None", "list", "dict")
            and _kind(value) != _kind(saved)
        )
        if quoted or other_kind:
            saved_text = (
                ""
                if saved is _ABSENT
                else (
                    f"; the archive holds {_held(saved)}"
                    + (f" ({shown(saved)})" if _kind(saved) in ("number", "str", "bool") else "")
                )
            )
            written = f"{label}{value!r}" if label.endswith("=") else f"{label} = {value!r}"
            suspects.append((key, label, f"{written} (a {type(value).__name__}{saved_text})"))
    if not suspects:
        return None
    return DecodeError(
        f"{cls.__name__} cannot be built with the value you passed: {'; '.join(s[2] for s in suspects)} "
        f"({type(err).__name__}: {err}).",
        archive=archive,
        key=suspects[0][1] if len(suspects) == 1 else None,
        hint="Pass a value of the kind the saved one has, or leave "
        + ("it" if len(suspects) == 1 else "them")
        + " out to load the saved value.",
    )
