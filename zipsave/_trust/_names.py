"""Global names in pickles and in trusted=: one spelling for trust decisions, and the hints
that explain a refusal."""

from __future__ import annotations

import _compat_pickle
import importlib
import types
from collections.abc import Iterable
from typing import Any

__all__ = [
    "BY_VALUE_HINT",
    "BY_VALUE_MARK",
    "CODE_HINT",
    "TORCH_PICKLE_HINT",
    "TORCH_PICKLE_RUNNERS",
    "CODE_RUNNERS",
    "DYNAMIC_GLOBAL",
    "LOCAL_HINT",
    "canonical",
    "fix_py2_name",
    "import_attribute",
    "import_spelling",
    "numpy_major",
    "is_dotted",
    "is_dunder",
    "is_local",
    "normalise_trusted",
]

LOCAL_HINT = (
    "It is defined inside a function (or is a lambda), so it was pickled by value and cannot "
    "be imported by name. Replace the entry with `custom_objects={key: value}`, or pass "
    "`allow_pickle=True` if you trust the archive completely."
)
DYNAMIC_GLOBAL = "<STACK_GLOBAL with a computed name>"
# Globals that rebuild code objects or reach the operating system. Suggesting
# `trusted=[name]` for them would teach users to let any archive run code.
CODE_RUNNERS = (
    "cloudpickle.",
    "types.",
    "builtins.",
    "os.",
    "posix.",
    "nt.",
    "subprocess.",
    "sys.",
    "shutil.",
    "importlib.",
    "runpy.",
    "pickle.",
    "marshal.",
    "ctypes.",
    "socket.",
    "operator.",
    "functools.",
    "io.",
    "_io.",
    "pathlib.",
    "tempfile.",
    "codecs.",
    "glob.",
    "urllib.",
    "http.",
)
CODE_HINT = (
    "It rebuilds code stored in the archive or reaches the operating system, so trusting it would "
    "let this archive (and any other) run arbitrary code. Replace the entry with "
    "`custom_objects={key: value}`, or pass `allow_pickle=True` only if you trust the archive completely."
)
# How torch pickles a tensor (SB3 pickles tensor attributes that way, e.g. ARS's `weights`):
# its helpers run `torch.load` without `weights_only`, so they are never trusted. Dense tensors
# are read through the unpickler's weights-only stand-ins (_substitutes.py); other kinds are refused.
TORCH_PICKLE_RUNNERS = ("torch.storage._load_from_bytes", "torch._utils._rebuild_")
TORCH_PICKLE_HINT = (
    "It rebuilds a kind of tensor (sparse, quantized, ...) that zipsave reads from a torch pickle "
    "only when dense; torch's own helpers run `torch.load` without `weights_only` and so could run code "
    "from the archive: trusting them would let any archive do that. Replace the entry with "
    "`custom_objects={key: value}`, or pass `allow_pickle=True` only if you trust the archive completely."
)

#: The words of BY_VALUE_HINT a caller can look for in a skipped entry's cause.
BY_VALUE_MARK = "`trusted=` cannot admit"
BY_VALUE_HINT = (
    "The value holds {classes}, which cloudpickle stored as code, not by import path (it does so for "
    "a class defined in `__main__` (a script or notebook), inside a function, or in a module it could not "
    "import), so "
    "`trusted=` cannot admit {them}. Pass the value with `custom_objects={{key: value}}` (built with the "
    "class imported), or define the class in an importable module and save again; `allow_pickle=True` "
    "only if you trust the archive completely."
)


# -- names -----------------------------------------------------------------------------------
def canonical(module: str, qualname: str) -> tuple[str, str]:
    """Spell numpy's core modules the numpy-2 way, whichever numpy wrote the pickle, and the
    old ``gym`` package's spaces as gymnasium's."""
    # numpy 2 renamed numpy.core to numpy._core and left a shim that warns on every access;
    # one spelling for trust decisions keeps both archive generations loadable.
    if module == "numpy.core" or module.startswith("numpy.core."):
        module = "numpy._core" + module[len("numpy.core") :]
    # SB3 < 2.0 pickled the spaces of the `gym` package, which gymnasium continues under the
    # same module paths; gymnasium's spaces read gym's pickled state (its `__setstate__` takes
    # the legacy `shape` and `np_random` keys). Read as gymnasium's, they load where `gym` is
    # not installed, under the allowlist, as SB3 2.x would convert them anyway.
    if module == "gym.spaces" or module.startswith("gym.spaces."):
        module = "gymnasium.spaces" + module[len("gym.spaces") :]
    return module, qualname


def import_spelling(module: str) -> str:
    if module == "numpy._core" or module.startswith("numpy._core."):
        if numpy_major() < 2:
            return "numpy.core" + module[len("numpy._core") :]
    return module


# numpy 2 names whose object numpy 1 has under another name (numpy 1.20-1.23 kept `numpy.bool`
# as a deprecated alias of the *builtin* bool, which would be the wrong object).
_NUMPY1_ATTRIBUTES = {("numpy", "bool"): "bool_"}


def import_attribute(module: str, qualname: str) -> str:
    """The attribute path to look up on the imported ``module`` for ``qualname``."""
    renamed = _NUMPY1_ATTRIBUTES.get((module, qualname))
    if renamed is not None and numpy_major() < 2:
        return renamed
    return qualname


def numpy_major() -> int:
    return int(importlib.import_module("numpy").__version__.split(".")[0])


def fix_py2_name(module: str, name: str) -> tuple[str, str]:
    # What pickle.Unpickler.find_class does for protocols 0-2 (`__builtin__.set` and
    # `copy_reg._reconstructor`); overriding find_class loses it, so it is repeated here.
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def is_local(qualname: str) -> bool:
    return any(part.startswith("<") for part in qualname.split("."))


def is_dotted(name: str) -> bool:
    return bool(name) and all(part.isidentifier() for part in name.split("."))


def _normalise_entry(item: Any) -> str:
    if isinstance(item, str):
        text = item.strip()
        if text.endswith(".*"):
            text = text[:-1]
        if ":" in text:
            module, _, qualname = text.partition(":")
            if not (is_dotted(module) and is_dotted(qualname)):
                raise ValueError(f"`trusted` entry {item!r} is not of the form 'pkg.mod:Name'.")
            return f"{module}.{qualname}"
        if text.endswith("."):
            if not is_dotted(text[:-1]):
                raise ValueError(f"`trusted` entry {item!r} is not a package prefix such as 'pkg.' or 'pkg.mod.*'.")
            return text
        if is_local(text):
            raise ValueError(f"`trusted` entry {item!r} names a local object. {LOCAL_HINT}")
        if not is_dotted(text) or "." not in text:
            raise ValueError(
                f"`trusted` entry {item!r} is not a global name: expected 'pkg.mod.Name', "
                "'pkg.mod:Name', 'pkg.mod.*' or 'pkg.' (pass `allow_pickle=True` to trust everything)."
            )
        return text
    if isinstance(item, types.ModuleType):
        return f"{item.__name__}."
    defined_in: Any = getattr(item, "__module__", None)
    name: Any = getattr(item, "__qualname__", None)
    if not (isinstance(defined_in, str) and isinstance(name, str)):
        raise TypeError(f"`trusted` entries must be names, classes, functions or modules; got {type(item).__name__}.")
    if is_local(name):
        raise ValueError(f"cannot trust `{defined_in}.{name}`. {LOCAL_HINT}")
    return f"{defined_in}.{name}"


def normalise_trusted(trusted: Any) -> tuple[str, ...]:
    if trusted is None:
        return ()
    # A class can be iterable (an Enum is), so objects that name one global come first.
    if isinstance(trusted, (str, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
        items: Iterable[Any] = (trusted,)
    elif isinstance(trusted, Iterable):
        items = trusted
    else:
        items = (trusted,)
    entries: list[str] = []
    for item in items:
        entry = _normalise_entry(item)
        if entry not in entries:
            entries.append(entry)
    return tuple(entries)
