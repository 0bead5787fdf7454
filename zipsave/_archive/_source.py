"""The one archive reader every reading verb and tool opens: the destination rule for inputs,
the validated zip reader, the format-version check, and JSON members checked against the
manifest."""

from __future__ import annotations

import contextlib
from typing import Any

from .. import _archive, _format, _json  # _archive: the progress bar, imported only when one is wanted
from .._version import __version__
from ..exceptions import ArchiveFormatError, IntegrityError, ZipsaveError, as_zipsave_error
from ._destination import is_url, open_source
from ._limits import DEFAULT_LIMITS, Limits
from ._reader import ArchiveReader

__all__ = ["ArchiveSource", "parse_version"]


def parse_version(text: str) -> tuple[str | None, int | None]:
    """``(zipsave version, format version)`` from a ``_zipsave_version`` member's text."""
    version = fmt = None
    for line in text.splitlines():
        word, _, value = line.partition(" ")
        if word == "zipsave":
            version = value.strip() or None
        elif word == "format" and value.strip().isascii() and value.strip().isdigit():
            fmt = int(value)  # ASCII digits only: `isdigit` admits `²`, which `int` refuses
    return version, fmt


class _Layout:
    """The folders of an archive, from one pass over its member names. (A plain class: a
    ``NamedTuple`` cost every first load 0.15-0.2 ms at import, for three attributes.)"""

    __slots__ = ("children", "components", "members")

    def __init__(self, components: list[str], members: dict[str, list[str]], children: dict[str, list[str]]) -> None:
        self.components = components  # every folder with its own `data`, in member order
        self.members = members  # folder -> the members directly inside it
        self.children = children  # folder -> its child components (see `child_components`)


class ArchiveSource:
    """An open archive to read. Use as a context manager; file objects passed in stay open.

    Parameters
    ----------
    path
        File path (``.zip`` is tried too), fsspec URL, or readable binary file object.
    limits
        Safety limits (:class:`~zipsave.Limits`).
    storage_options
        Options for the fsspec filesystem of a URL ``path``.
    progress
        Count the bytes read on a tqdm bar.
    check_version
        Refuse an archive of a newer format than this zipsave reads (tools that only describe
        an archive turn this off and report it instead).
    """

    def __init__(
        self,
        path: Any,
        *,
        limits: Limits | None = None,
        storage_options: dict[str, Any] | None = None,
        progress: bool = False,
        check_version: bool = True,
    ) -> None:
        self.limits = limits or DEFAULT_LIMITS
        self.involved: set[str] = set()  # folders whose handlers `involve_handlers` imported
        self._layout_cache: _Layout | None = None
        self._folder_tree: dict[str, dict] | None = None
        self._json_bytes: dict[str, bytes] = {}  # JSON members a handler looked at, until parsed
        self.arrays: dict[str, Any] = {}  # array members read, each once (`_tensors.read_array_once`)
        if progress:
            _archive.check_progress(progress)
        self._stack = contextlib.ExitStack()
        try:
            fp, name = self._stack.enter_context(open_source(path, storage_options=storage_options, progress=progress))
        except BaseException:  # the caller's path (a wrong type, a missing file): theirs to see
            self._stack.close()
            raise
        try:
            if progress:
                fp = _archive.counting_reader(fp, progress, desc=f"zipsave load {name}", stack=self._stack)
            self.name: str = name
            self.file = fp  # the whole file, for a detached signature's digest (zipsave._sign)
            self.local_path: str | None = name if not hasattr(path, "read") and not is_url(path) else None
            self.reader = ArchiveReader(fp, archive=name, limits=self.limits)
            self.zipsave_version, self.format_version = self._read_version()
            if check_version:
                self._check_format_version()
        except BaseException as err:
            self._stack.close()
            new = as_zipsave_error(err, name)
            if new is None:
                raise
            raise new from err

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> ArchiveSource:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        # The error boundary: from here on every byte read is the archive's, so whatever the
        # reading raises leaves as a ZipsaveError naming it, with the original as its cause.
        self.close()
        if exc is not None:
            new = as_zipsave_error(exc, self.name)
            if new is not None:
                raise new from exc

    # -- members -------------------------------------------------------------------------------
    def has(self, member: str) -> bool:
        return member in self.reader

    def names(self) -> list[str]:
        return self.reader.names()

    def read_text(self, member: str, *, limit: int = 1 << 20) -> str:
        """A small text member, unverified (``system_info.txt``, the version file)."""
        return self.reader.read(member, limit=limit, verify=False).decode("utf-8", "replace")

    def json_bytes(self, member: str) -> bytes:
        """A JSON member's bytes as stored (at most the JSON limit, unchecked), kept until
        :meth:`read_json` parses them: a handler's look at ``data`` and its decode share one read."""
        raw = self._json_bytes.get(member)
        if raw is None:
            raw = self._json_bytes[member] = self.reader.read(member, limit=self.limits.max_json_bytes, verify=False)
        return raw

    def read_json(self, member: str, *, verify: bool = True, on_edited: Any = None) -> Any:
        """Read and parse a JSON member. With ``verify`` it must match its manifest entry;
        a mismatch of a member a person may edit (``data``, ``init.json``) is passed to
        ``on_edited(error)`` instead of raised, when given."""
        raw = self._json_bytes.pop(member, None)
        if raw is None:
            raw = self.reader.read(member, limit=self.limits.max_json_bytes, verify=False)
        edited = None
        if verify:
            try:
                self.reader.check_recorded(member)
                self.reader.check_digest(member, raw)
            except IntegrityError as err:
                if on_edited is None or member.rpartition("/")[2] not in _format.EDITABLE:
                    raise
                edited = err
        try:
            value = self.parse_json(member, raw)
        except ZipsaveError as err:
            if edited is not None:  # one error says both; "decoding it key by key" would not happen
                cause = err.detail.removeprefix("not valid JSON: ")
                err.detail = f"{edited.detail} It was edited after saving and is no longer valid JSON: {cause}"
                err.hint = (
                    err.hint or "Undo the edit (or fix the JSON syntax); nothing of it can be decoded key by key."
                )
                err.args = (err._compose(),)
            raise
        if edited is not None:
            on_edited(edited)
        return value

    def parse_json(self, member: str, raw: bytes) -> Any:
        try:
            return _json.parse_json(raw, max_depth=self.limits.max_json_depth, limits=self.limits)
        except ZipsaveError as err:
            err.archive, err.member = self.name, member
            err.args = (err._compose(),)
            raise

    # -- layout -------------------------------------------------------------------------------
    # One pass over the member names per archive, however many folders a load asks about:
    # a scan per folder made a load quadratic in the component folders (16 000 took 52 s).
    def _layout(self) -> _Layout:
        if self._layout_cache is None:
            names = self.names()
            suffix = "/" + _format.DATA
            components = [n[: -len(suffix)] for n in names if n.endswith(suffix)]
            members: dict[str, list[str]] = {}
            for name in names:
                members.setdefault(name.rpartition("/")[0], []).append(name)
            children: dict[str, list[str]] = {}
            for sub in components:
                parent, _, last = sub.rpartition("/")
                if last:
                    children.setdefault(parent, []).append(sub)
                if parent and not self.has(_format.join(parent, _format.DATA)):
                    # a dict of components (`x/key`, where `x` has no data of its own)
                    children.setdefault(parent.rpartition("/")[0], []).append(sub)
            self._layout_cache = _Layout(components, members, children)
        return self._layout_cache

    def components(self) -> list[str]:
        """Every component folder (a folder with its own ``data``)."""
        return list(self._layout().components)

    def child_components(self, folder: str) -> list[str]:
        """Component folders directly below ``folder``: ``x``, or ``x/key`` where ``x`` has no
        ``data`` of its own (a dict of components)."""
        return list(self._layout().children.get(folder, ()))

    def subfolders(self, folder: str) -> list[str]:
        """The names of the folders directly inside ``folder`` that hold members."""
        if self._folder_tree is None:
            self._folder_tree = {}  # each name split once, not walked up folder by folder
            for name in self.names():
                tree = self._folder_tree
                for part in name.split("/")[:-1]:
                    tree = tree.setdefault(part, {})
        node: dict[str, dict] | None = self._folder_tree
        for part in folder.split("/") if folder else ():
            node = node.get(part) if node is not None else None
        return sorted(node or ())

    def members_in(self, folder: str) -> list[str]:
        """The members directly inside ``folder`` (not in its sub-folders)."""
        return list(self._layout().members.get(folder, ()))

    # -- format version ---------------------------------------------------------------------
    def _read_version(self) -> tuple[str | None, int | None]:
        if not self.has(_format.VERSION):
            return None, None
        return parse_version(self.reader.read(_format.VERSION, limit=4096, verify=False).decode("utf-8", "replace"))

    def version_mismatch(self) -> IntegrityError | None:
        """How the version member differs from its manifest entry (``None``: it matches, or
        there is nothing to compare). Its format line was read unverified, to know how to read
        the rest: a load says so if that line was changed after saving."""
        if self.reader.manifest is None or not self.has(_format.VERSION):
            return None
        try:
            self.reader.read(_format.VERSION, limit=4096, verify=True)
        except IntegrityError as err:
            return err
        return None

    def _check_format_version(self) -> None:
        """Refuse an archive written in a newer format than this zipsave reads."""
        if self.format_version is not None and self.format_version > _format.FORMAT_VERSION:
            raise ArchiveFormatError(
                f"uses archive format {self.format_version}; this zipsave ({__version__}) reads formats up to "
                f"{_format.FORMAT_VERSION}.",
                archive=self.name,
                member=_format.VERSION,
                hint="Upgrade zipsave (`pip install -U zipsave`).",
            )
