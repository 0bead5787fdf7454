"""The exceptions zipsave raises on purpose: one base, and subclasses that also inherit
the builtin a caller would catch."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

from ._printable import visible
from ._record import Record, record

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = [
    "AlgorithmMismatchError",
    "ArchiveFormatError",
    "ArchiveNotFoundError",
    "ArchiveLimitError",
    "CheckpointDirectoryError",
    "CheckpointLockedError",
    "DecodeError",
    "DeviceError",
    "EncodeError",
    "IntegrityError",
    "MissingDependencyError",
    "ParameterMismatchError",
    "SignatureError",
    "SkippedEntry",
    "SkippedEntryWarning",
    "StorageError",
    "UnsafeGlobalError",
    "UnsafeNameError",
    "UsageError",
    "ZipsaveError",
    "ZipsaveWarning",
    "as_zipsave_error",
    "boundary",
    "caller_stacklevel",
    "named_key",
    "nesting_as_error",
    "reading",
]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning issued by the calling function point at the first
    frame outside zipsave: the user's line, however deep inside zipsave the warning is raised."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def describe_path(path: Any) -> str:
    """How an archive (path, URL or file object) is named in messages."""
    if path is None:
        return ""
    if isinstance(path, (str, os.PathLike)):
        return os.fspath(path)
    name = getattr(path, "name", None)
    if isinstance(name, str):
        return name
    return f"<{type(path).__name__}>"


#: How a hint written before the key is known spells the fix (``UnsafeGlobalError``'s, the
#: trust policy's): a message that knows the key shows the call to copy instead.
_ANY_KEY = "`custom_objects={key: value}`"


def named_key(text: str, key: str | None) -> str:
    """``text`` with its generic ``custom_objects={key: value}`` naming ``key``."""
    return text if key is None else text.replace(_ANY_KEY, f"`custom_objects={{{key!r}: ...}}`")


class ZipsaveError(Exception):
    """Base of every error zipsave raises on purpose.

    The structured fields (``archive``, ``member``, ``key``) are kept as attributes so a
    caller can act on them; the message is built from them.
    """

    def __init__(
        self,
        message: str,
        *,
        archive: Any = None,
        member: str | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.archive = describe_path(archive) or None
        self.member = member
        self.key = key
        self.hint = hint
        self.detail = message
        super().__init__(self._compose())

    def _compose(self) -> str:
        where = []
        if self.archive:
            where.append(f"archive `{self.archive}`")
        if self.member is not None:
            where.append(f"member `{self.member}`")
        if self.key is not None:
            where.append(f"key `{self.key}`")
        text = self.detail
        if where:
            text = f"{', '.join(where)}: {text}"
        if self.hint:
            text = f"{text} {self.hint}"
        # Every field may hold a name from an archive (a member `../\x1b[2J`): the message is
        # the one place they all pass, so it is made visible here, once.
        return visible(named_key(text, self.key))


class ArchiveFormatError(ZipsaveError, ValueError):
    """The file is not a readable zipsave/SB3 archive, or a member is malformed."""


class ArchiveLimitError(ArchiveFormatError):
    """A member or the archive exceeds a configured safety limit (zip bomb, huge member)."""


class IntegrityError(ArchiveFormatError):
    """A member's bytes do not match the size or hash recorded for it, or a tensor member
    cannot be read. ``expected`` and ``found`` hold the two checksums where they are known."""

    def __init__(self, message: str, *, expected: str | None = None, found: str | None = None, **kwargs: Any) -> None:
        self.expected = expected
        self.found = found
        super().__init__(message, **kwargs)


class StorageError(ZipsaveError, OSError):
    """Writing or reading the archive's storage failed (disk full, permission denied, a missing
    bucket or folder). ``errno`` is the cause's; the previous archive is left as it was."""

    def __init__(self, message: str, *, errno: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.errno = errno  # OSError's field, for callers that test `err.errno == ENOSPC`


class ArchiveNotFoundError(StorageError, FileNotFoundError):
    """The archive's path names no file (nor the path with ``.zip`` added); caught by
    ``except FileNotFoundError`` as well, like ``open`` and SB3's ``load``."""


class DecodeError(ZipsaveError, ValueError):
    """A value in ``data`` (or another JSON member) could not be decoded."""


class AlgorithmMismatchError(DecodeError, TypeError):
    """The archive holds a model of another algorithm (``PPO.load`` of a SAC archive), and the
    class asked for cannot be built from its values. ``saved`` names the archive's algorithm
    (``"SAC"``; ``None`` when only its policy shows it) and ``requested`` the class asked for.

    SB3's own ``load`` fails there with whatever its constructor raises first: mostly a
    ``TypeError`` (a policy given keywords it does not take) or a ``ValueError``
    (sb3-contrib's policy checks); this error is both. For some pairs SB3 raises an
    ``AttributeError`` (a policy without ``q_net``) or, with an ``env=`` whose action space the
    class does not support, an ``AssertionError``: this error is neither, on purpose. An
    ``AttributeError`` raised in a property is taken by Python as a missing attribute (the
    message lost to ``__getattr__``, ``hasattr`` answering ``False``), and an assertion is not
    how a file's content is refused (a file that holds no model is an ``ArchiveFormatError``
    where SB3 asserts too)."""

    def __init__(self, message: str, *, saved: str | None = None, requested: str | None = None, **kwargs: Any) -> None:
        self.saved = saved
        self.requested = requested
        super().__init__(message, **kwargs)


class EncodeError(ZipsaveError, TypeError):
    """A value could not be encoded for saving."""


class UsageError(ZipsaveError, TypeError):
    """A zipsave function was called the wrong way: an option passed by position where it is
    keyword-only, ``exclude=`` that is no list of names, a file object open in text mode. A
    ``TypeError``, as Python's own for such a call; raised before anything is read or written."""


class UnsafeGlobalError(ZipsaveError):
    """Loading would import or call a global that is not trusted."""

    def __init__(self, global_name: str, **kwargs: Any) -> None:
        self.global_name = global_name
        #: Classes the pickle stores as code (cloudpickle's by-value classes), when it is one.
        self.by_value: tuple[str, ...] = ()
        # Only a module path can be trusted; any other text is no name a library pickles, and a
        # hint must not hand it back as something to paste (a shell line, for the command).
        dotted = all(part.isidentifier() for part in global_name.split("."))
        kwargs.setdefault(
            "hint",
            f"To allow it, pass `trusted=[{global_name!r}]`, replace the entry with "
            "`custom_objects={key: value}`, or pass `allow_pickle=True` if you trust "
            "the archive completely."
            if dotted
            else "No module or class is named so: the archive is damaged or was made to break readers.",
        )
        super().__init__(f"refusing to import untrusted global `{global_name}`.", **kwargs)


class UnsafeNameError(ZipsaveError, ValueError):
    """A name read from the archive (a ``pytorch_variables.pth`` key, a ``data`` key, a member or
    component folder) would address something other than the object's own state: a dunder, a
    class or function attribute, a module, or zipsave itself. ``name`` holds the name."""

    def __init__(self, name: str, reason: str, **kwargs: Any) -> None:
        self.name = name
        kwargs.setdefault(
            "hint",
            "A name from an archive may only address the parameters, buffers and plain attributes the "
            "object already has; nothing was written. The archive was not written by zipsave or SB3 as it is.",
        )
        super().__init__(f"the name `{name}` {reason}; refused.", **kwargs)


class ParameterMismatchError(ZipsaveError, ValueError, RuntimeError):
    """Saved parameters do not fit the object they are loaded into.

    A ``ValueError``, as SB3 raises for an environment or ``policy_kwargs`` that differ from
    the saved ones, and a ``RuntimeError``, as torch's ``load_state_dict`` raises (through
    SB3's ``set_parameters``) for tensors of other shapes or names: code written to catch
    SB3's errors catches zipsave's."""


class DeviceError(ZipsaveError, ValueError, RuntimeError):
    """The ``device=`` a load was given is not a torch device, or not one this machine has
    (``"mps"`` without Metal, ``"cuda:3"`` on a one-GPU machine); raised before a byte is read.
    A ``ValueError``, and a ``RuntimeError`` as torch raises it through SB3's own ``load``.
    (CUDA asked for where there is none falls back to the CPU, as in SB3.)"""


class SignatureError(ZipsaveError, ValueError):
    """An archive's signature is missing where one is required, or it does not hold: an
    unknown signer, a member whose digest does not match, a signature over another file, or a
    signature that cannot be read. ``reason`` says which: ``"no-signature"``,
    ``"unknown-signer"``, ``"digest-mismatch"``, ``"other-file"``, ``"invalid"`` or
    ``"malformed"`` (:doc:`signing`). Nothing of the model is returned."""

    def __init__(self, message: str, *, reason: str = "invalid", **kwargs: Any) -> None:
        self.reason = reason
        super().__init__(message, **kwargs)


class MissingDependencyError(ZipsaveError, ImportError):
    """An optional feature was asked for, but the package it needs is not installed."""


class ZipsaveWarning(UserWarning):
    """Warnings zipsave issues (skipped entries, hash mismatches of editable members).

    The message is made visible (``zipsave._printable.visible``) when the warning is
    made, so ``warnings.warn(text, ZipsaveWarning)`` never carries a raw control character
    from an archive to a terminal or a log."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*(visible(a) if isinstance(a, str) else a for a in args))


@record(frozen=True, init=False, repr=False, eq=False)
class SkippedEntry(Record):
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

    # What `@dataclass(frozen=True)` generates, written out (it compiles them from source at
    # import, a cost of every first load); `record` keeps `fields()`, `replace()` and `asdict()`
    # working and adds the frozen `__setattr__`/`__delattr__` (see `Limits`).
    def __init__(self, member: str, key: str | None, type_hint: str | None, cause: str) -> None:
        object.__setattr__(self, "member", member)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "type_hint", type_hint)
        object.__setattr__(self, "cause", cause)

    def __str__(self) -> str:
        what = f"key `{self.key}` of member `{self.member}`" if self.key is not None else f"member `{self.member}`"
        hint = f" (type {self.type_hint})" if self.type_hint else ""
        return visible(f"{what}{hint}: {named_key(self.cause, self.key)}")


class SkippedEntryWarning(ZipsaveWarning):
    """Warns that one entry was skipped; ``.entry`` holds the :class:`SkippedEntry`."""

    def __init__(self, entry: SkippedEntry, archive: str | None) -> None:
        self.entry = entry
        self.archive = archive
        where = f"archive `{archive}`, " if archive else ""
        super().__init__(f"{where}skipped {entry}")


class CheckpointDirectoryError(ZipsaveError, ValueError):
    """A folder given to :class:`~zipsave.CheckpointManager` is not a checkpoint directory of
    zipsave (or its index is unreadable); nothing in it is changed."""


class CheckpointLockedError(ZipsaveError, RuntimeError):
    """Another :class:`~zipsave.CheckpointManager` holds the checkpoint directory."""


#: Left as they are even inside the boundary: the process's state, not the archive's (an
#: allocation that Limits should have prevented stays visible as what it is). KeyboardInterrupt
#: and SystemExit pass too: they are not Exceptions.
_PASS_THROUGH = (MemoryError,)
_FOREIGN_HINT = "No archive written by zipsave or SB3 holds this; it is damaged or was made to break readers."


def as_zipsave_error(
    err: BaseException, archive: Any, *, member: str | None = None, key: str | None = None, doing: str = "read"
) -> ZipsaveError | None:
    """The :class:`ZipsaveError` that stands for ``err``, raised while zipsave was reading
    ``archive``'s untrusted bytes; ``None`` when ``err`` passes as it is.

    A ``ZipsaveError`` without an archive gets this one's name (in place; ``None`` is returned,
    so it is re-raised as it is). ``MemoryError`` and what is not an ``Exception`` pass. Every
    other exception becomes: ``RecursionError`` an :class:`ArchiveFormatError` (nested too
    deep), ``OverflowError`` an :class:`ArchiveLimitError`, ``OSError`` a :class:`StorageError`
    with its ``errno``, anything else an :class:`ArchiveFormatError` naming its type and text.
    The caller raises the result ``from err``. A :class:`UsageError` is about the call, not
    the archive: it passes as it is."""
    if isinstance(err, UsageError):
        return None
    if isinstance(err, ZipsaveError):
        name = describe_path(archive) or None
        if err.archive is None and name is not None:
            err.archive = name
            err.member = err.member if err.member is not None else member
            err.key = err.key if err.key is not None else key
            err.args = (err._compose(),)
        return None
    if not isinstance(err, Exception) or isinstance(err, _PASS_THROUGH):
        return None
    fields: dict[str, Any] = {"archive": archive, "member": member, "key": key}
    if isinstance(err, RecursionError):
        return ArchiveFormatError(
            f"holds values nested too deeply to {doing} (past Python's recursion limit).", hint=_FOREIGN_HINT, **fields
        )
    cause = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    if isinstance(err, OSError):
        return StorageError(f"could not be {doing} ({cause}).", errno=err.errno, **fields)
    if isinstance(err, OverflowError):
        return ArchiveLimitError(f"holds a number too large to {doing} ({cause}).", hint=_FOREIGN_HINT, **fields)
    return ArchiveFormatError(f"could not be {doing} ({cause}).", hint=_FOREIGN_HINT, **fields)


@contextlib.contextmanager
def reading(archive: Any, *, member: str | None = None, key: str | None = None, doing: str = "read") -> Iterator[None]:
    """The error boundary around code that reads ``archive``'s untrusted bytes: what it raises
    leaves as a :class:`ZipsaveError` naming the archive (:func:`as_zipsave_error`), with the
    original as ``__cause__``."""
    try:
        yield
    except BaseException as err:
        new = as_zipsave_error(err, archive, member=member, key=key, doing=doing)
        if new is None:
            raise
        raise new from err


def boundary(func: _F) -> _F:
    """Decorate a public door that reads untrusted bytes (``load``, ``inspect``, ...): a value
    nested past Python's recursion limit in a hostile archive (a pickle of lists 100 000 deep),
    anywhere in the call, raises :class:`ArchiveFormatError` naming the archive, not a bare
    ``RecursionError``; a ``ZipsaveError`` without an archive gets the door's ``path``.

    Other exceptions are turned at the narrower boundary where the archive is open
    (:class:`~zipsave._archive.ArchiveSource`, :func:`reading`), so a caller's own mistake
    (a ``TypeError`` for a bad argument, raised before anything is read) reaches the caller
    as it is."""

    names = func.__code__.co_varnames[: func.__code__.co_argcount + func.__code__.co_kwonlyargcount]
    position = names.index("path") if "path" in names[: func.__code__.co_argcount] else 0

    @functools.wraps(func)
    def door(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (RecursionError, ZipsaveError) as err:
            where = kwargs.get("path", args[position] if len(args) > position else None)
            new = as_zipsave_error(err, where)
            if new is None:
                raise
            raise new from err

    return door  # type: ignore[return-value]


#: The first name of :func:`boundary`, kept for the doors that still spell it so.
nesting_as_error = boundary
