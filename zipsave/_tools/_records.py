"""What ``zipsave.inspect`` reports: frozen records of an archive's members, ``data`` keys, tensors
and components. Their text, notebook (HTML) and JSON forms are written by ``_render``."""

from __future__ import annotations

from typing import Any

from .. import _format
from .._record import Record, record
from ._render import info_dict, info_html, info_text

__all__ = ["ArchiveInfo", "ArchiveMember", "ComponentInfo", "DataEntry", "TensorInfo"]

# Each record is what `@dataclass(frozen=True)` makes of it, with `__init__`, `__repr__`,
# `__eq__` and `__hash__` written out: the decorator compiles those from source with `exec`,
# about 0.5 ms a class of every first inspect in a fresh process. It still makes each a frozen
# dataclass (`fields()`, `replace()`, `asdict()`, frozen subclasses) with the frozen
# `__setattr__`/`__delattr__` (`record`). Equality holds only within the exact class, on the
# fields in order, as the generated methods compare them; the hash is the hash of those fields.


@record(frozen=True, init=False, repr=False, eq=False)
class ArchiveMember(Record):
    """One zip member.

    Attributes
    ----------
    name
        The member name, e.g. ``"policy.pth"`` or ``"learner/data"``.
    size
        Uncompressed size in bytes.
    compressed_size
        Size in the file.
    compression
        ``"stored"`` or ``"deflated"``.
    sha256
        The digest ``manifest.json`` records for it, or ``None``.
    """

    name: str
    size: int
    compressed_size: int
    compression: str
    sha256: str | None

    def __init__(self, name: str, size: int, compressed_size: int, compression: str, sha256: str | None) -> None:
        set_ = object.__setattr__
        set_(self, "name", name)
        set_(self, "size", size)
        set_(self, "compressed_size", compressed_size)
        set_(self, "compression", compression)
        set_(self, "sha256", sha256)


@record(frozen=True, init=False, repr=False, eq=False)
class DataEntry(Record):
    """One key of a ``data`` member, described without decoding it.

    Attributes
    ----------
    component
        The component folder holding the ``data`` member (``""`` for the top level).
    key
        The key.
    type
        The saved ``":type:"`` hint without SB3's ``<class '...'>`` wrapping, or the JSON
        type (``"float"``, ``"list"``, ...) of a value stored as plain JSON.
    form
        ``"json"`` (stored as is), ``"native"`` (zipsave's pickle-free form) or ``"pickle"``
        (only ``":serialized:"``, or a native form holding a pickled part).
    summary
        A short, readable description of the value.
    globals
        Every global that decoding would import: from the pickle's opcodes (never executed)
        and from import paths in the native form.
    untrusted
        The subset of ``globals`` that the default :doc:`trust policy <security>` refuses.
    rebuilt
        True when a load rebuilds the value without unpickling it: a registered integration
        recognised it from the pickle's opcodes (SB3's and the RL Zoo's schedule closures), and
        ``summary`` says what it is (``"constant 0.0003"``, ``"linear 0.001 to 0"``).
    """

    component: str
    key: str
    type: str
    form: str
    summary: str
    globals: tuple[str, ...] = ()
    untrusted: tuple[str, ...] = ()
    rebuilt: bool = False

    def __init__(
        self,
        component: str,
        key: str,
        type: str,
        form: str,
        summary: str,
        globals: tuple[str, ...] = (),
        untrusted: tuple[str, ...] = (),
        rebuilt: bool = False,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "component", component)
        set_(self, "key", key)
        set_(self, "type", type)
        set_(self, "form", form)
        set_(self, "summary", summary)
        set_(self, "globals", globals)
        set_(self, "untrusted", untrusted)
        set_(self, "rebuilt", rebuilt)

    @property
    def name(self) -> str:
        """The address :func:`zipsave.read` accepts for this key."""
        return _format.join(self.component, self.key)

    @property
    def needs_pickle(self) -> bool:
        """True when loading it runs the (restricted) unpickler (not for a ``rebuilt`` one)."""
        return self.form == "pickle" and not self.rebuilt

    @property
    def trusted(self) -> bool:
        """True when the default policy admits every global it needs, or a load rebuilds it
        without unpickling."""
        return not self.untrusted or self.rebuilt


@record(frozen=True, init=False, repr=False, eq=False)
class TensorInfo(Record):
    """One tensor of a ``.pth`` member, from its metadata only.

    Attributes
    ----------
    member
        The ``.pth`` member, e.g. ``"policy.optimizer.pth"``.
    key
        Its path inside the saved object, parts joined with dots (``"0.weight"``,
        ``"state.0.exp_avg"``).
    dtype
        The torch dtype without the ``torch.`` prefix.
    shape
        The shape.
    nbytes
        Bytes of tensor data.
    """

    member: str
    key: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    def __init__(self, member: str, key: str, dtype: str, shape: tuple[int, ...], nbytes: int) -> None:
        set_ = object.__setattr__
        set_(self, "member", member)
        set_(self, "key", key)
        set_(self, "dtype", dtype)
        set_(self, "shape", shape)
        set_(self, "nbytes", nbytes)

    @property
    def name(self) -> str:
        """The address :func:`zipsave.read` accepts for this tensor (``"policy/0.weight"``)."""
        return f"{self.member[: -len(_format.PTH_SUFFIX)]}/{self.key}"


@record(frozen=True, init=False, repr=False, eq=False)
class ComponentInfo(Record):
    """A folder with its own ``data`` member: the top level (``""``) or a nested component.

    Attributes
    ----------
    name
        The folder, e.g. ``"learner/module"``; ``""`` for the top level.
    cls
        The class import path recorded in its ``init.json``, or ``None``.
    """

    name: str
    cls: str | None

    def __init__(self, name: str, cls: str | None) -> None:
        set_ = object.__setattr__
        set_(self, "name", name)
        set_(self, "cls", cls)


@record(frozen=True, init=False, repr=False, eq=False)
class ArchiveInfo(Record):
    """What :func:`inspect` found in an archive. Prints as text, renders as a table in Jupyter.

    Attributes
    ----------
    archive
        The archive's path (or the name of the file object).
    layout
        ``"zipsave"`` (has ``_zipsave_version``), ``"sb3"`` (has
        ``_stable_baselines3_version``) or ``"unknown"``.
    zipsave_version
        The package version in ``_zipsave_version`` (``None`` without one).
    format_version
        The archive format version in ``_zipsave_version``.
    sb3_version
        The version in ``_stable_baselines3_version``.
    system_info
        The saved ``system_info.txt``, parsed.
    members
        Every member in archive order.
    components
        Folders holding their own ``data`` (the top level first).
    data
        Every ``data`` key of every component.
    tensors
        Every tensor of every ``.pth`` member, in file order.
    manifest_digest
        SHA-256 of ``manifest.json``: one identifier for the whole saved state.
    notes
        Anything that could not be listed, and members whose zip directory entry disagrees
        with ``manifest.json``. Run ``zipsave verify`` for a full hash check.
    verified
        ``None`` unless inspected with ``verify=True``; then whether every member's bytes
        and every tensor record matched its checksum (problems are listed in ``notes``).
    signature
        The archive's signature in one sentence: who signed it, when inspected with
        ``trust=`` (see :doc:`signing`); else where a signature was found, not checked;
        ``None`` when it has none.
    """

    archive: str
    layout: str
    zipsave_version: str | None
    format_version: int | None
    sb3_version: str | None
    system_info: dict[str, str]
    members: tuple[ArchiveMember, ...]
    components: tuple[ComponentInfo, ...]
    data: tuple[DataEntry, ...]
    tensors: tuple[TensorInfo, ...]
    manifest_digest: str | None
    notes: tuple[str, ...]
    verified: bool | None = None
    signature: str | None = None

    def __init__(
        self,
        archive: str,
        layout: str,
        zipsave_version: str | None,
        format_version: int | None,
        sb3_version: str | None,
        system_info: dict[str, str],
        members: tuple[ArchiveMember, ...],
        components: tuple[ComponentInfo, ...],
        data: tuple[DataEntry, ...],
        tensors: tuple[TensorInfo, ...],
        manifest_digest: str | None,
        notes: tuple[str, ...],
        verified: bool | None = None,
        signature: str | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "archive", archive)
        set_(self, "layout", layout)
        set_(self, "zipsave_version", zipsave_version)
        set_(self, "format_version", format_version)
        set_(self, "sb3_version", sb3_version)
        set_(self, "system_info", system_info)
        set_(self, "members", members)
        set_(self, "components", components)
        set_(self, "data", data)
        set_(self, "tensors", tensors)
        set_(self, "manifest_digest", manifest_digest)
        set_(self, "notes", notes)
        set_(self, "verified", verified)
        set_(self, "signature", signature)

    @property
    def total_size(self) -> int:
        """Sum of the members' uncompressed sizes."""
        return sum(m.size for m in self.members)

    @property
    def pickled(self) -> tuple[DataEntry, ...]:
        """The ``data`` entries whose loading needs the unpickler."""
        return tuple(e for e in self.data if e.needs_pickle)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``zipsave inspect --json`` prints)."""
        return info_dict(self)

    def __str__(self) -> str:
        return info_text(self)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return info_html(self)
