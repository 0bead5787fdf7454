"""The load session: one open archive with the caller's trust policy, device and skip rules; every
read of a member during a load, restore or handler's build goes through it."""

from __future__ import annotations

import warnings
from typing import Any, Iterable

import numpy as np

from .. import _format
from .._archive import ArchiveSource
from .._codec import TYPE_KEY, Decoder
from .._tensors import get_device, load_member, read_array_member
from .._trust import TrustPolicy
from ..exceptions import (
    ArchiveFormatError,
    DecodeError,
    IntegrityError,
    SkippedEntry,
    SkippedEntryWarning,
    ZipsaveError,
    ZipsaveWarning,
)
from .. import _system_info
from ._parts import matches
from ._options import LoadOptions
from ._report import LoadReport

__all__ = ["LoadSession"]


class LoadSession:
    """An open archive plus everything a load needs: trust policy, device, skip rules.

    Parameters
    ----------
    path
        File path, URL, or readable binary file object.
    options
        The caller's :class:`LoadOptions`.
    """

    def __init__(self, path: Any, options: LoadOptions | None = None) -> None:
        options = options or LoadOptions()
        self.options = options
        self.policy: TrustPolicy = options.policy
        self.device = get_device(options.device)
        self.strict = options.strict
        self.verify = options.verify
        self.mmap = options.mmap
        self.built_components: set[str] = set()
        self.source = ArchiveSource(
            path, limits=options.limits, storage_options=options.storage_options, progress=options.progress
        )
        self.name = self.source.name
        self.reader = self.source.reader
        self.limits = self.source.limits
        self.report = options.report if options.report is not None else LoadReport()
        self.report.archive = self.name
        try:
            if self.reader.manifest_error and self.verify:
                self._integrity(self.reader.manifest_error, None)
            if self.verify and self.reader.manifest is not None:
                for lost in sorted(set(self.reader.manifest) - set(self.reader.names())):
                    self._integrity("is listed in manifest.json but missing from the archive.", lost)
            if self.has(_format.VERSION) or self.reader.manifest is not None:
                for name in _unrecognised(self.reader.names()):
                    self.skip(name, None, None, ArchiveFormatError(
                        "is not a member zipsave writes (renamed, damaged, or added by another tool); ignored."))
            if options.print_system_info:
                self.print_system_info()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> LoadSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def names(self) -> list[str]:
        return self.source.names()

    def child_components(self, folder: str) -> list[str]:
        return self.source.child_components(folder)

    # -- skip rules --------------------------------------------------------------------------
    def skip(self, member: str, key: str | None, type_hint: str | None, err: BaseException) -> None:
        cause = err.detail if isinstance(err, ZipsaveError) else f"{type(err).__name__}: {err}"
        if isinstance(err, ZipsaveError) and err.hint:
            cause = f"{cause} {err.hint}"
        entry = SkippedEntry(member, key, type_hint, cause)
        if self.strict:
            if isinstance(err, ZipsaveError):
                err.archive = err.archive or self.name
                err.member = err.member or member
                err.key = err.key or key
                err.args = (err._compose(),)
                raise err
            raise DecodeError(f"could not be loaded: {cause}", archive=self.name, member=member, key=key) from err
        self.report.skipped.append(entry)
        warnings.warn(SkippedEntryWarning(entry, self.name), stacklevel=4)

    def _integrity(self, message: str, member: str | None) -> None:
        if self.strict:
            raise IntegrityError(message, archive=self.name, member=member)
        self.report.notes.append(f"{member}: {message}" if member else message)
        where = f"member `{member}` " if member else ""
        warnings.warn(ZipsaveWarning(f"archive `{self.name}`: {where}{message}"), stacklevel=4)

    # -- members -------------------------------------------------------------------------------
    def print_system_info(self) -> None:
        """Print the saved and the current system info and the differences that matter."""
        text = None
        if self.has(_format.SYSTEM_INFO):
            try:
                text = self.source.read_text(_format.SYSTEM_INFO)
            except ZipsaveError as err:
                text = f"(unreadable: {err})"
        _system_info.print_system_info(text)

    def has(self, member: str) -> bool:
        return member in self.reader

    def read_json(self, member: str) -> Any:
        """Read and parse a JSON member. An edited ``data``/``init.json`` (hash mismatch) is
        reported and still decoded; any other member must match its manifest entry."""

        def edited(err: IntegrityError) -> None:
            self._integrity(f"{err.detail} It was edited after saving; decoding it key by key.", member)

        return self.source.read_json(member, verify=self.verify, on_edited=edited)

    def load_array(self, member: str) -> np.ndarray:
        return read_array_member(self.reader, member, verify=self.verify)

    def _check_member(self, member: str) -> None:
        if self.verify:
            self.reader.check_recorded(member)

    def load_tensors(self, member: str, targets: Any = None, **checks: Any) -> tuple[Any, set]:
        """Load a ``.pth`` member (into ``targets`` in place where shapes match); ``checks``
        are ``load_pth``'s ``check_shapes`` / ``check_dtypes`` / ``validate``."""
        return load_member(
            self.reader, member, device=self.device, targets=targets, verify=self.verify, mmap=self.mmap, **checks
        )

    def decode_data(
        self,
        folder: str,
        *,
        custom_objects: dict[str, Any] | None = None,
        exclude: Iterable[str] = (),
    ) -> dict[str, Any] | None:
        member = _format.join(folder, _format.DATA)
        if not self.has(member):
            return None
        raw = self.read_json(member)
        if not isinstance(raw, dict):
            raise ArchiveFormatError(
                f"must hold a JSON object, found {type(raw).__name__}.", archive=self.name, member=member
            )
        return self.decode_entries(raw, member, custom_objects=custom_objects, exclude=exclude)

    def decoder(self, member: str) -> Decoder:
        """A decoder for one JSON member, under this load's trust policy, device and limits."""
        return Decoder(
            self.policy,
            load_array=self.load_array,
            device=self.device,
            max_depth=self.limits.max_json_depth,
            archive=self.name,
            member=member,
        )

    def decode_entries(
        self, raw: dict, member: str, *, custom_objects: dict[str, Any] | None = None, exclude: Iterable[str] = ()
    ) -> dict[str, Any]:
        decoder = self.decoder(member)
        out: dict[str, Any] = {}
        exclude = list(exclude)
        for key, value in raw.items():
            if custom_objects is not None and key in custom_objects:
                out[key] = custom_objects[key]
                continue
            if exclude and matches(key, exclude):
                continue
            try:
                out[key] = decoder.decode_entry(key, value)
            except Exception as err:  # noqa: BLE001 - the skip rule covers every failure
                hint = value.get(TYPE_KEY) if isinstance(value, dict) else None
                self.skip(member, key, hint if isinstance(hint, str) else None, err)
        return out


_KNOWN_MEMBERS = frozenset({
    _format.DATA, _format.INIT, _format.VERSION, _format.SB3_VERSION, _format.SYSTEM_INFO, _format.MANIFEST,
})


def _unrecognised(names: Iterable[str]) -> list[str]:
    """Members of a zipsave archive that no reader of the format looks at."""
    out = []
    for name in names:
        folder, _, base = name.rpartition("/")
        if not base:  # a directory entry added by a zip tool
            continue
        if base in _KNOWN_MEMBERS or base.endswith(_format.PTH_SUFFIX):
            continue
        if base.endswith(_format.NPY_SUFFIX) and (folder + "/").endswith(_format.ARRAYS_DIR):
            continue
        out.append(name)
    return out
