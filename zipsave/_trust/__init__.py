"""Trust: what a pickled entry may import, the restricted unpickler that enforces it, and an
audit of a pickle's globals that executes nothing.

A pickle is a program: every global it names is imported and may be called with arguments
the archive chooses. Loading is safe here because of three layers:

1. **Trust.** :class:`TrustPolicy` admits a global only if it is in the default allowlist
   (zipsave's reviewed names plus each registered handler's), named by the caller in
   ``trusted=``, or ``allow_pickle=True`` was given. The check happens on the name, before
   anything is imported.
2. **Calls and mutation.** The unpickler only calls objects it imported by name, never mutates
   an imported global in place, and refuses instance state that would plant protocol
   attributes (``__array_interface__`` and friends) that numpy or torch read from instances.
3. **numpy's C-level state.** ``ndarray``/``dtype`` state is applied to a fresh object, a dtype
   must describe itself consistently, arrays are never built over a raw buffer by calling
   ``ndarray`` directly, and bit-generator positions must lie inside their buffers.

4. **Time and memory.** No C type is created without its ``__init__``, no Python class's
   constructor is called (pickles create them empty and set their state), what a call may
   allocate or iterate over is bounded by the pickle's size, and every set member and dict key
   goes through :class:`zipsave._bounds.KeyGuard` (no hash flooding). Other unpicklers
   (torch's ``weights_only``, DCP's metadata) read a pickle only after :func:`prescan_pickle`.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:  # what __getattr__ below imports on first use, spelled out for type checkers
    from ._allowlist import CORE_ALLOWLIST, GROUPS, default_allowlist
    from ._audit import pickle_globals
    from ._bounded import BoundedUnpickler
    from ._checks import bit_generator_state_problem, torch_generator_state_problem
    from ._names import BY_VALUE_MARK, normalise_trusted
    from ._policy import TrustPolicy
    from ._prescan import check_legacy_torch, check_torch_zip, prescan_pickle
    from ._space_check import space_problem
    from ._substitutes import SUBSTITUTED, StorageType
    from ._torch_calls import LEGACY_ITEMSIZE, check_torch_call, storage_reference
    from ._unpickler import restricted_loads

# Each name's module, imported on first use (PEP 562), so that a load imports the modules it
# uses and not the whole package. ``{name: module}`` (``module:attribute`` where renamed).
_LAZY: dict[str, str] = {
    **dict.fromkeys(("CORE_ALLOWLIST", "GROUPS", "default_allowlist"), "._allowlist"),
    "pickle_globals": "._audit",
    **dict.fromkeys(("bit_generator_state_problem", "torch_generator_state_problem"), "._checks"),
    **dict.fromkeys(("BY_VALUE_MARK", "normalise_trusted"), "._names"),
    "TrustPolicy": "._policy",
    "BoundedUnpickler": "._bounded",
    **dict.fromkeys(("check_torch_zip", "prescan_pickle"), "._prescan"),
    "space_problem": "._space_check",
    **dict.fromkeys(("SUBSTITUTED", "StorageType"), "._substitutes"),
    "restricted_loads": "._unpickler",
    **dict.fromkeys(("LEGACY_ITEMSIZE", "check_torch_call", "storage_reference"), "._torch_calls"),
    "check_legacy_torch": "._prescan",
}
# Its modules, found as attributes as when this file imported them all.
_SUBMODULES = frozenset(
    {
        "_allowlist",
        "_audit",
        "_bounded",
        "_checks",
        "_guards",
        "_names",
        "_nesting",
        "_policy",
        "_prescan",
        "_random",
        "_sealed",
        "_space_check",
        "_substitutes",
        "_torch_calls",
        "_unpickler",
    }
)

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES)

__all__ = [
    "BY_VALUE_MARK",
    "BoundedUnpickler",
    "CORE_ALLOWLIST",
    "GROUPS",
    "LEGACY_ITEMSIZE",
    "SUBSTITUTED",
    "StorageType",
    "TrustPolicy",
    "bit_generator_state_problem",
    "check_legacy_torch",
    "check_torch_call",
    "check_torch_zip",
    "default_allowlist",
    "normalise_trusted",
    "pickle_globals",
    "prescan_pickle",
    "restricted_loads",
    "space_problem",
    "storage_reference",
    "torch_generator_state_problem",
]
