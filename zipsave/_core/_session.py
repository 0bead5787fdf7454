"""The load session: one open archive with the caller's trust policy, device and skip rules; every
read of a member during a load, restore or handler's build goes through it."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterable

import numpy as np

# Packages whose parts load on first use (PEP 562); through _core: the system-info report, the
# signature check (`trust=`) and the exclude globs.
from .. import _codec, _core, _format, _tensors, _trust
from .._archive import ArchiveSource
from ..exceptions import (
    ArchiveFormatError,
    DecodeError,
    IntegrityError,
    SkippedEntry,
    SkippedEntryWarning,
    UnsafeGlobalError,
    ZipsaveError,
    ZipsaveWarning,
    as_zipsave_error,
    caller_stacklevel,
)
from ._members import broken_tensor_member, checksums, leave_out, stem, unrecognised
from ._options import LoadOptions
from ._report import LoadReport

__all__ = ["LoadSession"]

#: The JSON values that decode to themselves (the decoder returns any but a list or dict as is).
_SCALARS = frozenset({str, int, float, bool, type(None)})


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
        self._policy: _trust.TrustPolicy | None = None  # `options.policy`, asked for on first use
        self.device = _tensors.get_device(options.device, mmap=options.mmap)
        self.strict = options.strict
        self.verify = options.verify
        self.mmap = options.mmap
        self.built_components: set[str] = set()
        self._saved_versions: dict[str, str] | None = None
        self._json: dict[str, Any] = {}  # parsed JSON members: each is read and parsed once per load
        self.source = ArchiveSource(
            path, limits=options.limits, storage_options=options.storage_options, progress=options.progress
        )
        self.name = self.source.name
        self.reader = self.source.reader
        self.limits = self.source.limits
        self.report = options.report if options.report is not None else LoadReport()
        self.report.archive = self.name
        self._noted = set(self.report.notes)
        self.signature = None
        try:
            if options.trust is not None:  # before any member but the version line is read
                self.signature = self.report.signature = _core.check_source(self.source, options.trust)
            if self.reader.manifest_error and self.verify:
                self._integrity(self.reader.manifest_error, None)
            if self.verify and self.reader.manifest is not None:
                for lost in sorted(set(self.reader.manifest) - set(self.reader.names())):
                    self._integrity("is listed in manifest.json but missing from the archive.", lost)
                if (changed := self.source.version_mismatch()) is not None:  # read first, unchecked
                    self._integrity(f"{changed.detail} Its format line was read as it is.", _format.VERSION)
            if self.has(_format.VERSION) or self.reader.manifest is not None:
                for name in unrecognised(self.reader.names()):
                    self.record_skip(
                        name,
                        None,
                        None,
                        ArchiveFormatError(
                            "is not a member zipsave writes (renamed, damaged, or added by another tool); ignored."
                        ),
                    )
            if options.print_system_info:
                self.print_system_info()
        except BaseException as err:
            self.close()
            new = as_zipsave_error(err, self.name)
            if new is None:
                raise
            raise new from err

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> LoadSession:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        # The error boundary of every load verb (ArchiveSource's, for a session).
        self.close()
        if exc is not None:
            new = as_zipsave_error(exc, self.name)
            if new is not None:
                raise new from exc

    def names(self) -> list[str]:
        return self.source.names()

    def child_components(self, folder: str) -> list[str]:
        return self.source.child_components(folder)

    @property
    def policy(self) -> _trust.TrustPolicy:
        """The trust policy of this load: the caller's, with the references admitted so far."""
        if self._policy is None:
            self._policy = self.options.policy
        return self._policy

    def trust_references(self, objects: Iterable[Any]) -> None:
        """Admit ``objects`` (classes the caller named) as looked-up references for the rest of
        this load; a pickle that calls them stays under the allowlist
        (:meth:`~zipsave._trust.TrustPolicy.with_references`)."""
        self._policy = self.policy.with_references(objects)

    # -- skip rules --------------------------------------------------------------------------
    def skip(
        self,
        member: str,
        key: str | None,
        type_hint: str | None,
        err: BaseException,
        *,
        warn: bool = True,
        exclude: str | None = None,
    ) -> None:
        """Skip a broken entry with a warning (``strict``: raise). A corrupt or unreadable tensor
        member (``.pth``/``.npy``) is never skipped quietly: it raises :class:`IntegrityError`
        unless the caller opted in with ``skip_broken_tensors=True``; its hint names ``exclude``
        (else the pattern found from ``member`` and ``key``) as what leaves the entry out."""
        broken = broken_tensor_member(member, err)
        if broken is not None and not self.options.skip_broken_tensors:
            raise self._integrity_error(broken, err, leave_out=exclude or leave_out(member, key, broken)) from err
        self.record_skip(member, key, type_hint, err, warn=warn)

    def record_skip(
        self, member: str, key: str | None, type_hint: str | None, err: BaseException, *, warn: bool = True
    ) -> None:
        """Skip an entry under the plain rule (warning, or an error under ``strict``); ``warn=False``
        records it only, for a caller that raises about it itself."""
        cause = err.detail if isinstance(err, ZipsaveError) else f"{type(err).__name__}: {err}"
        if isinstance(err, ZipsaveError) and err.member and err.member != member and err.member not in cause:
            kind = "array member" if err.member.endswith(_format.NPY_SUFFIX) else "member"
            cause = f"{kind} `{err.member}`: {cause}"
        if isinstance(err, ZipsaveError) and err.hint:
            cause = f"{cause} {err.hint}"
        if isinstance(err, UnsafeGlobalError) and type_hint and "'__main__." in type_hint and not err.by_value:
            # `trusted=["__main__.X"]` cannot help: cloudpickle stored the class itself, as code.
            cause = (
                f"{cause} Its class was defined in `__main__` (a script or notebook), so it was saved as "
                "code, not by import path: define the class in an importable module and save again, "
                "then `trusted=['module.Class']` admits it."
            )
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
        if warn:
            warnings.warn(SkippedEntryWarning(entry, self.name), stacklevel=caller_stacklevel())

    def _integrity_error(self, member: str, err: BaseException, *, leave_out: str | None = None) -> IntegrityError:
        """The error for a broken tensor member, with the recorded and the actual checksum."""
        hint = (
            f"The model would not be the one saved. Leave it out with `exclude=[{leave_out or stem(member)!r}]`, "
            "or pass `skip_broken_tensors=True` to keep the freshly built values there."
        )
        expected: str | None
        found: str | None
        if isinstance(err, IntegrityError) and (err.expected is not None or err.found is not None):
            expected, found, detail = err.expected, err.found, err.detail  # composed already
        else:
            expected, found = checksums(self.reader, member)
            if isinstance(err, IntegrityError):
                detail = err.detail
            else:
                cause = err.detail if isinstance(err, ZipsaveError) else f"{type(err).__name__}: {err}"
                detail = f"is corrupt or unreadable ({cause.rstrip('.')})."
            if member not in self.reader:
                detail = "is missing from the archive (removed or renamed after saving?)."
            else:
                detail = f"{detail} Zip directory: {expected}; its bytes: {found}."
        return IntegrityError(detail, archive=self.name, member=member, expected=expected, found=found, hint=hint)

    def _integrity(self, message: str, member: str | None) -> None:
        if self.strict:
            raise IntegrityError(message, archive=self.name, member=member)
        note = f"{member}: {message}" if member else message
        if note not in self._noted:  # a member read twice (a handler's look, then the decode) is one note
            self._noted.add(note)  # a set: a list scan per note made 100 000 missing members take 41 s
            self.report.notes.append(note)
        where = f"member `{member}` " if member else ""
        warnings.warn(ZipsaveWarning(f"archive `{self.name}`: {where}{message}"), stacklevel=caller_stacklevel())

    # -- members -------------------------------------------------------------------------------
    def print_system_info(self) -> None:
        """Print the saved and the current system info and the differences that matter."""
        text = None
        if self.has(_format.SYSTEM_INFO):
            try:
                text = self.source.read_text(_format.SYSTEM_INFO)
            except ZipsaveError as err:
                text = f"(unreadable: {err})"
        _core.print_system_info(text)

    def has(self, member: str) -> bool:
        return member in self.reader

    def json_bytes(self, member: str) -> bytes:
        """A JSON member's bytes as stored, unchecked (:meth:`ArchiveSource.json_bytes`)."""
        return self.source.json_bytes(member)

    def read_json(self, member: str) -> Any:
        """Read and parse a JSON member, once per load: every later call returns the same
        object, which callers must not change. An edited ``data``/``init.json`` (hash mismatch)
        is reported (once) and still decoded; any other member must match its manifest entry."""
        if member in self._json:
            return self._json[member]

        def edited(err: IntegrityError) -> None:
            if self.strict:
                raise IntegrityError(
                    f"{err.detail} It was edited after saving, and `strict=True` refuses an edited member.",
                    archive=self.name,
                    member=member,
                    expected=err.expected,
                    found=err.found,
                    hint="Load without `strict=True` to decode the edited values key by key.",
                ) from err
            self._integrity(f"{err.detail} It was edited after saving; decoding it key by key.", member)

        value = self._json[member] = self.source.read_json(member, verify=self.verify, on_edited=edited)
        return value

    def load_array(self, member: str) -> np.ndarray:
        try:
            return _tensors.read_array_once(self.source, member, verify=self.verify, mmap=self.mmap)
        except (ArchiveFormatError, DecodeError) as err:
            if self.options.skip_broken_tensors:
                raise
            raise self._integrity_error(member, err) from err

    def array_header(self, member: str) -> _tensors.NpyHeader:
        """The checked header of an array member, its data left unread (a ``deferred`` decode)."""
        try:
            return _tensors.read_array_header(self.reader, member, verify=self.verify)
        except (ArchiveFormatError, DecodeError) as err:
            if self.options.skip_broken_tensors:
                raise
            raise self._integrity_error(member, err) from err

    def read_array_into(self, member: str, dest: np.ndarray, *, leave_out: str | None = None) -> None:
        """Read an array member straight into ``dest`` (same shape and dtype, C-contiguous,
        writeable), CRC-checked; a member that fails is an :class:`IntegrityError` naming it,
        and ``dest`` may then hold part of its data."""
        try:
            _tensors.read_array_member_into(self.reader, member, dest, verify=self.verify)
        except (ArchiveFormatError, DecodeError, OSError) as err:
            raise self._integrity_error(member, err, leave_out=leave_out) from err

    def check_stored(self, member: str) -> None:
        """Check a tensor member's stored bytes against the CRC-32 its zip directory records
        (and that against ``manifest.json``), reading them into nothing the caller holds: the
        check a member must pass before it is read into live memory, which a failure half way
        would leave partly overwritten. Raises what a read would (:class:`IntegrityError`,
        :class:`ArchiveFormatError`, :class:`DecodeError`), naming the archive and member."""
        if member not in self.reader:
            raise DecodeError("is missing from the archive.", archive=self.name, member=member)
        self.reader.check_recorded(member)
        expected = self.reader.info(member).CRC
        view = self.reader.open_view(member)
        try:
            crc = _tensors.stored_crc(view)
        except OSError as err:
            raise ArchiveFormatError(f"could not be read ({err}).", archive=self.name, member=member) from err
        finally:
            view.close()
        if crc is None:
            raise ArchiveFormatError("ends early (truncated).", archive=self.name, member=member)
        if crc != expected:
            raise IntegrityError(
                f"CRC-32 {crc:08x} does not match the recorded {expected:08x} (corrupted).",
                archive=self.name,
                member=member,
                expected=f"crc32 {expected:08x}",
                found=f"crc32 {crc:08x}",
            )

    def _check_member(self, member: str) -> None:
        if self.verify:
            self.reader.check_recorded(member)

    def load_tensors(self, member: str, targets: Any = None, **checks: Any) -> tuple[Any, set]:
        """Load a ``.pth`` member (into ``targets`` in place where shapes match); ``checks``
        are ``load_pth``'s ``check_shapes`` / ``check_dtypes`` / ``validate``."""
        return _tensors.load_member(
            self.reader, member, device=self.device, targets=targets, verify=self.verify, mmap=self.mmap, **checks
        )

    def decode_data(
        self,
        folder: str,
        *,
        custom_objects: dict[str, Any] | None = None,
        exclude: Iterable[str] = (),
        quiet: Iterable[str] = (),
        recover: Callable[[str, Any], Any] | None = None,
        deferred: Iterable[str] = (),
    ) -> dict[str, Any] | None:
        member = _format.join(folder, _format.DATA)
        if not self.has(member):
            return None
        raw = self.read_json(member)
        if not isinstance(raw, dict):
            raise ArchiveFormatError(
                f"must hold a JSON object, found {type(raw).__name__}.", archive=self.name, member=member
            )
        return self.decode_entries(
            raw, member, custom_objects=custom_objects, exclude=exclude, quiet=quiet, recover=recover, deferred=deferred
        )

    def decoder(self, member: str, *, deferred: bool = False) -> _codec.Decoder:
        """A decoder for one JSON member, under this load's trust policy, device and limits
        (``deferred``: each array member decodes to its checked :class:`NpyHeader`, unread)."""
        return _codec.Decoder(
            lambda: self.policy,  # asked for only by a pickled value or an import path
            load_array=self.array_header if deferred else self.load_array,  # type: ignore[arg-type]
            device=self.device,
            max_depth=self.limits.max_json_depth,
            archive=self.name,
            member=member,
            saved_versions=self.saved_versions,
            limits=self.limits,
        )

    def saved_versions(self) -> dict[str, str]:
        """The versions in the archive's ``system_info.txt`` (empty if it has none or it
        cannot be read): which gymnasium, numpy... wrote it, for error messages."""
        if self._saved_versions is None:
            self._saved_versions = {}
            if self.has(_format.SYSTEM_INFO):
                try:
                    self._saved_versions = _core.parse_system_info(self.source.read_text(_format.SYSTEM_INFO))
                except ZipsaveError:
                    pass  # only used to word an error; the error itself still comes
        return self._saved_versions

    def decode_entries(
        self,
        raw: dict,
        member: str,
        *,
        custom_objects: dict[str, Any] | None = None,
        exclude: Iterable[str] = (),
        quiet: Iterable[str] = (),
        recover: Callable[[str, Any], Any] | None = None,
        deferred: Iterable[str] = (),
    ) -> dict[str, Any]:
        """Decode every key of a ``data`` object under the skip rule. A key in ``custom_objects``
        is taken as given, never decoded; a key in ``quiet`` that fails is recorded in the report
        without a warning (the caller says it once, itself). ``recover(key, raw_value)`` may
        rebuild a key that failed (an integration recognising its own data); it raises if not.
        The array members of a key in ``deferred`` are left unread: each decodes to its checked
        header (:class:`NpyHeader`), for a caller that reads them into memory of its choosing."""
        decoders: dict[bool, _codec.Decoder] = {}  # {deferred: decoder}, for a key not a JSON scalar
        deferred = set(deferred)
        quiet = set(quiet)
        out: dict[str, Any] = {}
        exclude = list(exclude)
        for key, value in raw.items():
            if custom_objects is not None and key in custom_objects:
                out[key] = custom_objects[key]
                continue
            if exclude and _core.matches(key, exclude):
                continue
            if type(value) in _SCALARS:  # decodes to itself: a step count needs no codec imported
                out[key] = value
                continue
            try:
                later = key in deferred
                decoder = decoders.get(later) or decoders.setdefault(later, self.decoder(member, deferred=later))
                out[key] = decoder.decode_entry(key, value)
            except Exception as err:  # noqa: BLE001 - the skip rule covers every failure
                if recover is not None and not isinstance(err, IntegrityError):
                    try:
                        out[key] = recover(key, value)
                        continue
                    except Exception:  # noqa: BLE001, S112 - not recognised: the skip rule applies
                        pass
                hint = value.get(_codec.TYPE_KEY) if isinstance(value, dict) else None
                self.skip(member, key, hint if isinstance(hint, str) else None, err, warn=key not in quiet)
        return out
