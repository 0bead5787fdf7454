"""The plug-in seam: handlers that teach the core to save, rebuild and trust one family of objects.

An integration (``zipsave.sb3``, ``zipsave.rllib``, ``zipsave.dcp`` ...) never gets a branch in
the core. It subclasses :class:`Handler` and registers an instance, either by calling
:func:`register` or, so that it is found without being imported first, through the entry-point
group ``zipsave.handlers`` of its distribution (zipsave's own are declared in ``setup.cfg``).
A handler module must import its library (SB3, Ray, ...) only inside its methods.

Entry points are listed on the first question, and each is imported only when a question may
concern it (:func:`handlers` with ``members=`` or ``live=``): a folder holding one of its
:attr:`Handler.markers` or whose ``data`` names one of its :attr:`Handler.data_keys`, an
object of a library in its :attr:`Handler.libraries` (none can exist before that library is
imported), or the archive naming it (:func:`by_name`). So a first load of a plain torch
archive imports no integration, even one whose state dicts are called ``policy`` as SB3's
are. Zipsave's own entry points declare all three in :data:`ENTRY_HINTS`, since reading them
off the class would import it; any other entry point is imported on the first question, as
before.

The core asks, in this order: which handler claims an object being saved (:meth:`claims`;
never asked about a dict, which is app state); which one builds a class named by
``load(cls=...)`` (:meth:`builds`) or an archive folder whose ``init.json`` names it
(``"handler"``) or that it recognises (:meth:`recognises`; not asked about a folder the
manifest lists as saved from a dict); which one restores into a live object other than a
dict (:meth:`restores`), and what values it recognises there
(:meth:`known_values`); and which reviewed globals each handler adds to the restricted
unpickler's allowlist (:attr:`allowlist`): those of the handlers the load selected by the rules
above (:func:`selected`), so a load imports no integration for its allowlist either.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from importlib import metadata
from typing import Any, ClassVar

from ._distributions import SUFFIXES, folder_parts, metadata_folders, normalized
from .exceptions import ZipsaveWarning

__all__ = [
    "ENTRY_HINTS",
    "ENTRY_POINT_GROUP",
    "Handler",
    "by_name",
    "generation",
    "handlers",
    "register",
    "selected",
    "unregister",
]

ENTRY_POINT_GROUP = "zipsave.handlers"

#: ``{entry point name: (libraries, markers, data_keys)}`` of zipsave's own integrations: what
#: their handler classes declare (a test keeps the two equal), known here without importing them.
ENTRY_HINTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "sb3": (
        ("stable_baselines3", "sb3_contrib", "rl_zoo3", "zipsave.sb3"),
        ("_stable_baselines3_version",),
        ("policy_class",),
    ),
    "rllib": (("ray", "zipsave.rllib"), (), ()),
}


class Handler:
    """Base class of a plug-in. Override what the integration supports; the defaults decline.

    The ``session`` a handler receives is the core's load session (``zipsave._core.LoadSession``):
    an open archive with the caller's trust policy, device and skip rules.
    """

    #: Unique name; written as ``init.json``'s ``"handler"`` for archives this handler builds.
    name: ClassVar[str] = ""
    #: Modules (top-level packages or dotted names) without which no object this handler claims,
    #: builds or restores can exist; until one is imported the registry need not import the
    #: handler to ask about objects. Empty: asked about every object.
    libraries: ClassVar[tuple[str, ...]] = ()
    #: Member names (in the folder asked about, or at the archive's root) one of which a
    #: folder it :meth:`recognises` holds. Empty: it recognises no folder by itself (it writes
    #: ``init.json``'s ``"handler"``, or recognises nothing).
    markers: ClassVar[tuple[str, ...]] = ()
    #: Keys of the folder's ``data`` one of which a folder it :meth:`recognises` without a
    #: marker holds (SB3's ``policy_class``). Looked for in ``data``'s bytes before the handler
    #: is imported, so a match only means it is asked.
    data_keys: ClassVar[tuple[str, ...]] = ()
    #: ``"module.qualname"`` globals, reviewed as data-only, that the restricted unpickler may
    #: import for every load that involves this handler (``selected()``; e.g. SB3's policy
    #: and schedule classes). Not imported to look a name up: until then the names are refused.
    allowlist: ClassVar[frozenset[str]] = frozenset()
    #: ``{"module.qualname": check}`` for classes of :attr:`allowlist` that a pickle creates
    #: empty and fills: ``check(obj)`` says what is wrong with one once the whole pickle is read
    #: (a value its library would fail on at first use: SB3's action noises), or ``None``.
    value_checks: ClassVar[Mapping[str, Callable[[Any], str | None]]] = {}

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
        self,
        session: Any,
        folder: str,
        *,
        cls: Any,
        custom_objects: dict | None,
        exclude: list[str],
        overrides: dict[str, Any],
    ) -> Any:
        """Rebuild the object saved in ``folder``."""
        raise NotImplementedError

    def restores(self, obj: Any) -> bool:
        """True when :meth:`restore` should load an archive folder into the live ``obj``."""
        return False

    def restore(
        self,
        session: Any,
        obj: Any,
        folder: str,
        *,
        custom_objects: dict | None,
        exclude: list[str],
        exact_match: bool,
        into: str | None = None,
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

    def describe_values(self, session: Any, folder: str) -> dict[str, str]:
        """The values :meth:`known_values` rebuilds for a folder this handler :meth:`recognises`,
        in words (``{"lr_schedule": "constant 0.0003"}``), for ``zipsave inspect`` and ``diff``:
        found without importing the library or torch, never by unpickling."""
        return {}

    def checked_data(self, session: Any, obj: Any, data: dict[str, Any], given: AbstractSet[str]) -> dict[str, Any]:
        """The decoded ``data`` :func:`zipsave.restore` is to set on a live ``obj`` this handler
        :meth:`claims`: raise to refuse it, leave a key out to keep ``obj``'s own (``given``:
        the caller's ``custom_objects``, taken as they are)."""
        return data

    def describe_mismatch(self, session: Any, obj: Any, folder: str) -> tuple[str, str] | None:
        """For a restore into an ``obj`` this handler :meth:`claims` whose state dicts are not
        the archive folder's: ``(what the folder holds, the fix)`` in the user's words (SB3's
        ``("a SAC model", "Load it with `SAC.load(path)` ...")``), or ``None`` when it cannot tell."""
        return None

    def restore_component(self, session: Any, obj: Any, name: str) -> bool:
        """Fill the component folder ``name`` of ``obj`` itself (e.g. SB3's replay buffer);
        False lets the core rebuild or restore it as usual."""
        return False

    def __repr__(self) -> str:
        return f"<zipsave handler {self.name!r} ({type(self).__module__}.{type(self).__qualname__})>"


_lock = threading.RLock()
_handlers: list[Handler] = []
_pending: dict[str, Any] = {}  # entry points listed but not imported yet, by name
_entry_points_listed = False
_generation = 0


def register(handler: Handler) -> None:
    """Add ``handler`` (replacing one of the same name); later registrations are asked first."""
    global _generation
    if not isinstance(handler, Handler) or not handler.name:
        raise TypeError(f"expected a zipsave Handler instance with a `name`, got {handler!r}.")
    with _lock:
        _list_entry_points()
        _pending.pop(handler.name, None)  # explicit registrations win over entry points
        _handlers[:] = [h for h in _handlers if h.name != handler.name]
        _handlers.insert(0, handler)
        _generation += 1


def unregister(name: str) -> Handler | None:
    """Remove the handler called ``name`` and return it (``None`` when there is none)."""
    global _generation
    with _lock:
        found = by_name(name)
        if found is not None:
            _handlers.remove(found)
            _generation += 1
        return found


_GROUP_BYTES = ENTRY_POINT_GROUP.encode()
_O_READ = os.O_RDONLY | getattr(os, "O_BINARY", 0)
#: Files are opened relative to their ``sys.path`` folder (not walked again for each of some 200
#: distributions), and whether one exists is asked first: most have no entry points, and the
#: exception of a failed ``os.open`` costs more than the question (a tenth of a fresh scan).
_OPEN_AT = os.open in os.supports_dir_fd
_ASK_AT = os.access in os.supports_dir_fd and os.access in os.supports_effective_ids


def _scan_entry_points() -> list[metadata.EntryPoint] | None:
    """The group's entry points as ``metadata.entry_points(group=...)`` lists them (the first
    distribution of a name along ``sys.path`` wins), reading only the ``entry_points.txt`` of
    each distribution instead of parsing every distribution's metadata (11 ms of a first load
    with 190 installed). ``None`` where distributions may also come from elsewhere (a zip on
    ``sys.path``, a finder that lists its own) or where importlib.metadata would name one by its
    metadata rather than its folder: the caller then asks importlib.metadata."""
    folders = metadata_folders()
    if folders is None:
        return None
    names: set[str] = set()
    found: list[metadata.EntryPoint] = []
    for folder, children in folders:
        new = []
        for child in children:
            name = folder_parts(child)[0]
            if not child.endswith(SUFFIXES) or not name.strip("."):
                return None  # importlib.metadata names such a folder by its METADATA
            name = normalized(name)
            if name not in names:
                names.add(name)
                new.append(child)
        if new:
            found.extend(_read_entries(folder, new))
    return found


def _read_entries(path: str, dists: list[str]) -> list[metadata.EntryPoint]:
    """The group's entry points in the ``entry_points.txt`` of the folders ``dists`` of ``path``."""
    found: list[metadata.EntryPoint] = []
    fd = None
    if _OPEN_AT:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        for dist in dists:
            name = dist + "/entry_points.txt"
            if fd is None:
                name = os.path.join(path, name)
            elif _ASK_AT and not os.access(name, os.F_OK, dir_fd=fd, effective_ids=True):
                continue
            try:
                file = os.open(name, _O_READ, dir_fd=fd)
            except OSError:
                continue
            try:
                chunks = []
                while chunk := os.read(file, 1 << 16):
                    chunks.append(chunk)
            except OSError:
                continue
            finally:
                os.close(file)
            text = b"".join(chunks)
            if _GROUP_BYTES in text:
                found.extend(_group_entries(text.decode("utf-8", "replace")))
    finally:
        if fd is not None:
            os.close(fd)
    return found


def _group_entries(text: str) -> list[metadata.EntryPoint]:
    """The entry points of ``ENTRY_POINT_GROUP`` in one ``entry_points.txt`` (an ini file)."""
    section, entries = None, []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")  # as importlib.metadata reads it: '[ g ]' is not 'g'
        elif section == ENTRY_POINT_GROUP and "=" in line:
            name, _, value = line.partition("=")
            entries.append(metadata.EntryPoint(name=name.strip(), value=value.strip(), group=ENTRY_POINT_GROUP))
    return entries


def _list_entry_points() -> None:
    global _entry_points_listed
    if _entry_points_listed:
        return
    _entry_points_listed = True
    scanned = _scan_entry_points()
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP) if scanned is None else scanned:
        if entry.name not in _pending and not any(h.name == entry.name for h in _handlers):
            _pending[entry.name] = entry


def _load(name: str) -> None:
    """Import the pending entry point ``name`` and register its handler (after those loaded)."""
    global _generation
    entry = _pending.pop(name, None)
    if entry is None:
        return
    try:
        handler = entry.load()
        if callable(handler) and not isinstance(handler, Handler):
            handler = handler()
        if not any(h.name == handler.name for h in _handlers):
            _handlers.append(handler)
    except Exception as err:  # noqa: BLE001 - one broken plug-in must not break every load
        warnings.warn(
            f"zipsave: the handler entry point `{entry.value}` failed to load: {err!r}", ZipsaveWarning, stacklevel=4
        )
    _generation += 1


def _wanted(name: str, members: AbstractSet[str] | None, live: bool, data: Callable[[], bytes | None]) -> bool:
    hint = ENTRY_HINTS.get(name)
    if hint is None or (members is None and not live):
        return True
    libraries, markers, data_keys = hint
    if live and any(lib in sys.modules for lib in libraries):
        return True
    if members is None:
        return False
    if any(marker in members for marker in markers):
        return True
    if not data_keys:
        return False
    raw = data()
    return raw is None or any(f'"{key}"'.encode() in raw for key in data_keys)


def handlers(
    *,
    members: Iterable[str] | None = None,
    live: bool = False,
    data: Callable[[], bytes | None] | None = None,
) -> tuple[Handler, ...]:
    """Registered handlers, the most recently registered first.

    Without arguments, every one (each entry point imported). With ``live=True``, only those
    that may concern a live object or class (their library is imported); with ``members``
    (member names of the folder asked about and of the archive's root), also those that may
    recognise such a folder: one of their markers is among ``members``, or ``data()`` (the
    folder's raw ``data`` bytes, ``b""`` when it has none, ``None`` when they cannot be read)
    holds one of their data keys. Handlers already imported are always included.
    """
    seen: list[bytes | None] = []

    def data_once() -> bytes | None:
        if not seen:
            seen.append(data() if data is not None else None)
        return seen[0]

    with _lock:
        _list_entry_points()
        wanted = None if members is None else members if isinstance(members, AbstractSet) else frozenset(members)
        for name in list(_pending):
            if _wanted(name, wanted, live, data_once):
                _load(name)
        return tuple(_handlers)


def by_name(name: str) -> Handler | None:
    """The handler called ``name`` (importing only its entry point), or ``None``."""
    with _lock:
        _list_entry_points()
        if name in _pending:
            _load(name)
        return next((h for h in _handlers if h.name == name), None)


def generation() -> int:
    """A counter that changes whenever the set of imported handlers does (for caches built from
    it). Imports no entry point: a handler imported later changes it."""
    with _lock:
        return _generation


def selected() -> tuple[int, tuple[Handler, ...]]:
    """``(generation(), handlers(live=True))`` taken together: the handlers a load involves so far.

    Those already imported (the archive named them, their markers or data keys were found, a
    class of theirs was passed), those whose library the process imported, and any entry point
    without :data:`ENTRY_HINTS`; never one of zipsave's integrations that nothing selected, so
    what only that integration would add (its allowlist) is absent, not imported on demand.
    """
    with _lock:
        found = handlers(live=True)
        return _generation, found
