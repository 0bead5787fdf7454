"""The one archive reader every reading verb and tool opens: the destination rule for inputs,
the validated zip reader, the format-version check, and JSON members checked against the
manifest."""

from __future__ import annotations

import contextlib
from typing import Any

from .. import _format, _json
from .._version import __version__
from ..exceptions import ArchiveFormatError, IntegrityError, ZipsaveError
from . import _progress
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
        elif word == "format" and value.strip().isdigit():
            fmt = int(value)
    return version, fmt


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
        self, path: Any, *, limits: Limits | None = None, storage_options: dict[str, Any] | None = None,
        progress: bool = False, check_version: bool = True,
    ) -> None:
        self.limits = limits or DEFAULT_LIMITS
        self.involved: set[str] = set()  # folders whose handlers `involve_handlers` imported
        _progress.check(progress)
        self._stack = contextlib.ExitStack()
        try:
            fp, name = self._stack.enter_context(
                open_source(path, storage_options=storage_options, progress=progress)
            )
            fp = _progress.counting_reader(fp, progress, desc=f"zipsave load {name}", stack=self._stack)
            self.name: str = name
            self.file = fp  # the whole file, for a detached signature's digest (zipsave._sign)
            self.local_path: str | None = name if not hasattr(path, "read") and not is_url(path) else None
            self.reader = ArchiveReader(fp, archive=name, limits=self.limits)
            self.zipsave_version, self.format_version = self._read_version()
            if check_version:
                self._check_format_version()
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> ArchiveSource:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- members -------------------------------------------------------------------------------
    def has(self, member: str) -> bool:
        return member in self.reader

    def names(self) -> list[str]:
        return self.reader.names()

    def read_text(self, member: str, *, limit: int = 1 << 20) -> str:
        """A small text member, unverified (``system_info.txt``, the version file)."""
        return self.reader.read(member, limit=limit, verify=False).decode("utf-8", "replace")

    def read_json(self, member: str, *, verify: bool = True, on_edited: Any = None) -> Any:
        """Read and parse a JSON member. With ``verify`` it must match its manifest entry;
        a mismatch of a member a person may edit (``data``, ``init.json``) is passed to
        ``on_edited(error)`` instead of raised, when given."""
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
                err.hint = err.hint or "Undo the edit (or fix the JSON syntax); nothing of it can be decoded key by key."
                err.args = (err._compose(),)
            raise
        if edited is not None:
            on_edited(edited)
        return value

    def parse_json(self, member: str, raw: bytes) -> Any:
        try:
            return _json.parse_json(raw, max_depth=self.limits.max_json_depth)
        except ZipsaveError as err:
            err.archive, err.member = self.name, member
            err.args = (err._compose(),)
            raise

    # -- layout -------------------------------------------------------------------------------
    def components(self) -> list[str]:
        """Every component folder (a folder with its own ``data``)."""
        suffix = "/" + _format.DATA
        return [n[: -len(suffix)] for n in self.names() if n.endswith(suffix)]

    def child_components(self, folder: str) -> list[str]:
        """Component folders directly below ``folder``: ``x``, or ``x/key`` where ``x`` has no
        ``data`` of its own (a dict of components)."""
        prefix = f"{folder}/" if folder else ""
        found = []
        for sub in self.components():
            if not sub.startswith(prefix) or not sub[len(prefix):]:
                continue
            parts = sub[len(prefix):].split("/")
            if len(parts) == 1 or (len(parts) == 2 and not self.has(_format.join(prefix + parts[0], _format.DATA))):
                found.append(sub)
        return found

    def members_in(self, folder: str) -> list[str]:
        """The members directly inside ``folder`` (not in its sub-folders)."""
        prefix = f"{folder}/" if folder else ""
        return [n for n in self.names() if n.startswith(prefix) and "/" not in n[len(prefix):]]

    # -- format version ---------------------------------------------------------------------
    def _read_version(self) -> tuple[str | None, int | None]:
        if not self.has(_format.VERSION):
            return None, None
        return parse_version(self.reader.read(_format.VERSION, limit=4096, verify=False).decode("utf-8", "replace"))

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
