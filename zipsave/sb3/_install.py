"""Adopt zipsave for a whole process: point SB3's own save and load functions at zipsave's,
and put SB3's back on request.

SB3 is imported by :func:`install`, never when this module is imported.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from collections.abc import Iterable, Iterator
from typing import Any

from zipsave._archive import Limits
from zipsave._calls import keyword_options
from zipsave._sign import Trust
from zipsave._trust import TrustPolicy
from zipsave.exceptions import UsageError

from . import _doors, _policies, _replace, _state
from ._state import Options

__all__ = ["Options", "current_options", "install", "installed", "is_installed", "uninstall"]


_lock = threading.RLock()
_functions: dict[str, tuple[Any, Any]] = {}  # name -> (SB3's function, zipsave's replacement)

#: Module-level functions of ``stable_baselines3.common.save_util`` that SB3, sb3-contrib and
#: the RL Zoo import by name (``base_class``, ``off_policy_algorithm``, ``sb3_contrib.ars``).
FUNCTIONS = ("save_to_zip_file", "load_from_zip_file", "save_to_pkl", "load_from_pkl")


def current_options() -> Options:
    """The options of the running installation (SB3's defaults when none is installed)."""
    return _state.current_options() or Options()


def is_installed() -> bool:
    """Whether SB3's save and load currently go through zipsave."""
    return _state.current_options() is not None


@keyword_options("zipsave.sb3.install")
def install(
    *,
    allow_pickle: bool = False,
    trusted: Iterable[Any] = (),
    strict: bool = False,
    limits: Limits | None = None,
    trust: Any = None,
) -> None:
    """Make every SB3 save and load in this process go through zipsave.

    SB3's algorithms (``model.save``, ``Algo.load``, ``model.set_parameters``), sb3-contrib's
    and the RL Zoo's, SB3's callbacks, ``save_replay_buffer``/``load_replay_buffer``,
    ``policy.save``/``Policy.load`` and ``VecNormalize.save``/``load`` then write atomic
    archives with a manifest and load under zipsave's rules: safe by default, a broken
    ``data`` entry skipped with a warning. Archives SB3 wrote keep loading.

    Calling it again only changes the options; :func:`uninstall` puts SB3's functions back.

    Parameters
    ----------
    allow_pickle
        Trust every archive completely (SB3's plain ``cloudpickle`` behaviour). Default False.
    trusted
        Globals (classes, functions, ``"pkg.module.Name"``, ``"pkg.module.*"``) admitted on top
        of zipsave's reviewed allowlist, for every load. Default none.
    strict
        Raise instead of skipping a broken entry. Default False.
    limits
        The :class:`~zipsave.Limits` of every load through SB3's functions (archives, side
        pickles such as replay-buffer files, policy files), including what a model rebuilt
        from hyper-parameters may take (``max_model_bytes``). Default: ``zipsave.Limits()``.
    trust
        A :class:`~zipsave.Trust`: every archive SB3 loads must carry a signature it accepts
        (checked before anything is decoded; the ``sign`` extra). Default ``None``: no check.

    Examples
    --------
    >>> import zipsave.sb3
    >>> zipsave.sb3.install()
    >>> zipsave.sb3.is_installed()
    True
    >>> zipsave.sb3.uninstall()
    """
    # Normalise (and validate) the trust options now, not at the first load.
    policy = TrustPolicy.make(allow_pickle=allow_pickle, trusted=trusted)
    if not isinstance(strict, bool):
        raise UsageError(f"`strict` must be True or False, got {strict!r}.")
    if limits is not None and not isinstance(limits, Limits):
        raise UsageError(f"`limits` must be a zipsave.Limits or None, got {type(limits).__name__}.")
    if trust is not None and not isinstance(trust, Trust):
        raise UsageError(f"`trust` must be a zipsave.Trust or None, got {type(trust).__name__}.")
    options = Options(
        allow_pickle=policy.allow_pickle, trusted=policy.trusted, strict=strict, limits=limits, trust=trust
    )
    with _lock:
        if _state.current_options() is None:
            _patch()
        _state.set_options(options)


def uninstall() -> None:
    """Put SB3's own save and load functions back (nothing happens if zipsave is not installed).

    Archives written while zipsave was installed stay readable by SB3: they keep SB3's member
    names and ``":serialized:"`` values. Only the files of ``policy.save``,
    ``save_replay_buffer`` and ``VecNormalize.save`` need zipsave to be read again.
    """
    with _lock:
        if _state.current_options() is None:
            return
        _unpatch()
        _state.set_options(None)


@contextlib.contextmanager
@keyword_options("zipsave.sb3.installed")
def installed(
    *,
    allow_pickle: bool = False,
    trusted: Iterable[Any] = (),
    strict: bool = False,
    limits: Limits | None = None,
    trust: Any = None,
) -> Iterator[None]:
    """Install zipsave for a ``with`` block; on leaving, the previous state comes back
    (SB3's functions, or the options of an installation made before the block).

    The arguments are those of :func:`install`.

    Examples
    --------
    >>> import zipsave.sb3
    >>> with zipsave.sb3.installed(strict=True):
    ...     zipsave.sb3.is_installed()
    True
    >>> zipsave.sb3.is_installed()
    False
    """
    with _lock:
        before = _state.current_options()
        install(allow_pickle=allow_pickle, trusted=trusted, strict=strict, limits=limits, trust=trust)
    try:
        yield
    finally:
        with _lock:
            if before is None:
                uninstall()
            else:
                install(
                    allow_pickle=before.allow_pickle,
                    trusted=before.trusted,
                    strict=before.strict,
                    limits=before.limits,
                    trust=before.trust,
                )


# -- patching --------------------------------------------------------------------------------
def _targets() -> list[tuple[type, str, Any]]:
    """(class, attribute, zipsave's replacement) for the methods SB3 saves and loads with
    directly instead of through ``save_util``."""
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
    from stable_baselines3.common.policies import BaseModel
    from stable_baselines3.common.vec_env import VecNormalize

    return [
        (BaseAlgorithm, "load", classmethod(_replace.algorithm_load)),
        (BaseAlgorithm, "save", _replace.algorithm_save),
        (BaseAlgorithm, "set_parameters", _replace.set_parameters),
        (OffPolicyAlgorithm, "load_replay_buffer", _doors.load_replay_buffer),
        (BaseModel, "save", _policies.policy_save),
        (BaseModel, "load", classmethod(_policies.policy_load)),
        (VecNormalize, "save", _replace.vec_normalize_save),
        (VecNormalize, "load", staticmethod(_replace.vec_normalize_load)),
    ]


def _patch() -> None:
    # Import every SB3 module that looks a save_util function up by name, so that the scan
    # below finds it; sb3-contrib and the Zoo, imported later, get zipsave's from save_util.
    import stable_baselines3.common.base_class  # noqa: F401
    import stable_baselines3.common.off_policy_algorithm  # noqa: F401
    from stable_baselines3.common import save_util

    for name in FUNCTIONS:
        _functions[name] = (getattr(save_util, name), getattr(_replace, name))
    _swap_functions(to_zipsave=True)
    for owner, attr, replacement in _targets():
        _state.ORIGINALS[(owner, attr)] = owner.__dict__[attr]
        setattr(owner, attr, replacement)


def _unpatch() -> None:
    for (owner, attr), original in _state.ORIGINALS.items():
        setattr(owner, attr, original)
    _state.ORIGINALS.clear()
    _swap_functions(to_zipsave=False)
    _functions.clear()


def _swap_functions(*, to_zipsave: bool) -> None:
    """Replace, in every loaded module, each global bound to one function by the other.

    Matching by identity finds every place the name was imported to (``from save_util import
    load_from_zip_file`` in SB3, sb3-contrib, the Zoo or the user's own code) without a list
    that would go stale. Only plain modules are scanned: reading a lazy module's namespace
    would import it.
    """
    pairs = {name: (sb3, ours) if to_zipsave else (ours, sb3) for name, (sb3, ours) in _functions.items()}
    for module in list(sys.modules.values()):
        # zipsave's own modules define the replacements under SB3's names: never swap those.
        if type(module) is not types.ModuleType or module.__name__.startswith("zipsave."):
            continue
        namespace = module.__dict__
        for name, (old, new) in pairs.items():
            if namespace.get(name) is old:
                namespace[name] = new
