"""The plug-in seam: handlers that teach the core to save, rebuild and trust one family of objects.

An integration (``zipsave.sb3``, ``zipsave.rllib``, ``zipsave.dcp`` ...) never gets a branch in
the core. It subclasses :class:`Handler` and registers an instance, either by calling
:func:`register` or, so that it is found without being imported first, through the entry-point
group ``zipsave.handlers`` of its distribution (zipsave's own are declared in ``setup.cfg``).
Entry points are loaded once, on the first question the core asks the registry; a handler
module must therefore import its library (SB3, Ray, ...) only inside its methods.

The core asks, in this order: which handler claims an object being saved (:meth:`claims`);
which one builds a class named by ``load(cls=...)`` (:meth:`builds`) or an archive folder whose
``init.json`` names it (``"handler"``) or that it recognises (:meth:`recognises`); which one
restores into a live object (:meth:`restores`), and what values it recognises there
(:meth:`known_values`); and which reviewed globals every handler adds to
the restricted unpickler's allowlist (:attr:`allowlist`).
"""

from __future__ import annotations

import threading
import warnings
from importlib import metadata
from typing import Any, ClassVar

__all__ = ["ENTRY_POINT_GROUP", "Handler", "by_name", "generation", "handlers", "register", "unregister"]

ENTRY_POINT_GROUP = "zipsave.handlers"


class Handler:
    """Base class of a plug-in. Override what the integration supports; the defaults decline.

    The ``session`` a handler receives is the core's load session (``zipsave._core.LoadSession``):
    an open archive with the caller's trust policy, device and skip rules.
    """

    #: Unique name; written as ``init.json``'s ``"handler"`` for archives this handler builds.
    name: ClassVar[str] = ""
    #: ``"module.qualname"`` globals, reviewed as data-only, that the restricted unpickler may
    #: import for every load (e.g. SB3's policy and schedule classes).
    allowlist: ClassVar[frozenset[str]] = frozenset()

    # -- saving -------------------------------------------------------------------------------
    def claims(self, obj: Any) -> bool:
        """True when :meth:`collect` should split ``obj`` into archive parts."""
        return False

    def collect(self, obj: Any, *, exclude: set[str], include: set[str]) -> Any:
        """``obj`` as a ``zipsave._core.Parts`` (data, state dicts, variables, components)."""
        raise NotImplementedError

    # -- loading ------------------------------------------------------------------------------
    def builds(self, cls: type) -> bool:
        """True when ``zipsave.load(path, cls=cls)`` should be built by :meth:`build`."""
        return False

    def recognises(self, session: Any, folder: str) -> bool:
        """True when the archive folder (no ``cls``, no handler named in ``init.json``) is one
        of this handler's; :meth:`build` is then called with ``cls=None``."""
        return False

    def build(
        self, session: Any, folder: str, *, cls: Any, custom_objects: dict | None, exclude: list[str],
        overrides: dict[str, Any],
    ) -> Any:
        """Rebuild the object saved in ``folder``."""
        raise NotImplementedError

    def restores(self, obj: Any) -> bool:
        """True when :meth:`restore` should load an archive folder into the live ``obj``."""
        return False

    def restore(
        self, session: Any, obj: Any, folder: str, *, custom_objects: dict | None, exclude: list[str],
        exact_match: bool, into: str | None = None,
    ) -> None:
        """Load the archive folder into ``obj`` in place; ``into`` (``restore(..., into=...)``)
        names where in ``obj`` it goes, ``None`` for the folder's own place."""
        raise NotImplementedError

    def known_values(self, session: Any, obj: Any, folder: str) -> dict[str, Any]:
        """``data`` values of the folder this handler rebuilds without decoding them (SB3's
        schedule closures), for :func:`zipsave.restore` into an ``obj`` it :meth:`claims` and for
        :func:`zipsave.load_archive` of a folder it :meth:`recognises` (``obj`` is ``None``); they
        go in as ``custom_objects`` the caller did not name."""
        return {}

    def restore_component(self, session: Any, obj: Any, name: str) -> bool:
        """Fill the component folder ``name`` of ``obj`` itself (e.g. SB3's replay buffer);
        False lets the core rebuild or restore it as usual."""
        return False

    def __repr__(self) -> str:
        return f"<zipsave handler {self.name!r} ({type(self).__module__}.{type(self).__qualname__})>"


_lock = threading.RLock()
_handlers: list[Handler] = []
_entry_points_loaded = False
_generation = 0


def register(handler: Handler) -> None:
    """Add ``handler`` (replacing one of the same name); later registrations are asked first."""
    global _generation
    if not isinstance(handler, Handler) or not handler.name:
        raise TypeError(f"expected a zipsave Handler instance with a `name`, got {handler!r}.")
    with _lock:
        _handlers[:] = [h for h in _handlers if h.name != handler.name]
        _handlers.insert(0, handler)
        _generation += 1


def unregister(name: str) -> Handler | None:
    """Remove the handler called ``name`` and return it (``None`` when there is none)."""
    global _generation
    with _lock:
        _load_entry_points()
        found = by_name(name)
        if found is not None:
            _handlers.remove(found)
            _generation += 1
        return found


def _load_entry_points() -> None:
    global _entry_points_loaded, _generation
    if _entry_points_loaded:
        return
    _entry_points_loaded = True  # set first: a handler module may itself ask the registry
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            handler = entry.load()
            if callable(handler) and not isinstance(handler, Handler):
                handler = handler()
            if not any(h.name == handler.name for h in _handlers):
                _handlers.append(handler)  # explicit registrations win over entry points
        except Exception as err:  # noqa: BLE001 - one broken plug-in must not break every load
            warnings.warn(f"zipsave: the handler entry point `{entry.value}` failed to load: {err!r}", stacklevel=3)
    _generation += 1


def handlers() -> tuple[Handler, ...]:
    """Every registered handler, the most recently registered first."""
    with _lock:
        _load_entry_points()
        return tuple(_handlers)


def by_name(name: str) -> Handler | None:
    """The handler called ``name``, or ``None``."""
    return next((h for h in handlers() if h.name == name), None)


def generation() -> int:
    """A counter that changes whenever the set of handlers does (for caches built from it)."""
    handlers()
    return _generation
