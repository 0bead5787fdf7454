"""Check a whole archive against its ``manifest.json``: structure, and every member's size,
CRC-32 and SHA-256. Nothing is decoded, unpickled or torch-loaded.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any

from .. import _format, _json
from .._archive import DEFAULT_LIMITS, ArchiveReader, Limits, open_source
from ..exceptions import ArchiveFormatError, nesting_as_error, reading

__all__ = ["verify"]


@nesting_as_error
def verify(
    path: Any, *, limits: Limits | None = None, require_manifest: bool = False, notes: list[str] | None = None
) -> list[str]:
    """Read every byte of an archive and list what does not match its manifest.

    Parameters
    ----------
    path
        A file path (``.zip`` is tried too), fsspec URL, or readable binary file object (not
        closed).
    limits
        Safety limits (:class:`~zipsave.Limits`) for reading; the defaults when ``None``.
    require_manifest
        Count a missing ``manifest.json`` as a problem. By default an archive without one (SB3's
        own) has every member's bytes checked against its zip CRC-32, and a note says so.
    notes
        A list to receive such notes.

    Returns
    -------
    list of str
        One sentence per problem, each naming the member; empty when the archive is intact.
        A broken zip structure, a missing or unreadable manifest, a member missing from the
        archive or from the manifest, and any size, CRC-32 or SHA-256 difference are problems.
        Every member's bytes are hashed; the SHA-256 is compared wherever the manifest records
        one (zipsave records it for every member written from memory, and for streamed tensor
        members when saved with ``sha256=True``).

    Raises
    ------
    ZipsaveError
        If ``path`` does not exist. Problems with the archive's content are returned, not
        raised.

    Examples
    --------
    >>> problems = verify("model.zip")  # doctest: +SKIP
    >>> problems  # doctest: +SKIP
    ['member `policy.pth`: SHA-256 3f1c... differs from manifest.json\\'s 9a0b....']
    """
    with open_source(path) as (fp, name), reading(name):  # the error boundary, as ArchiveSource's
        return _verify_file(fp, name, limits or DEFAULT_LIMITS, require_manifest, notes)


def _verify_file(fp: Any, archive: str, limits: Limits, require_manifest: bool, notes: list[str] | None) -> list[str]:
    try:
        reader = ArchiveReader(fp, archive=archive, limits=limits)
    except ArchiveFormatError as err:
        return [str(err)]
    try:
        return _check(reader, require_manifest, notes if notes is not None else [])
    finally:
        reader.close()


def _check(reader: ArchiveReader, require_manifest: bool, notes: list[str]) -> list[str]:
    problems: list[str] = []
    names = reader.names()
    if _format.MANIFEST not in reader:
        missing = (
            "archive has no manifest.json: it was not written by zipsave (SB3's own archives have "
            "none) or the manifest was removed; every member's bytes were checked against its zip CRC-32."
        )
        (problems if require_manifest else notes).append(missing)
    elif reader.manifest_error:
        problems.append(reader.manifest_error + ".")
    else:
        problems += _check_manifest_header(reader)
    manifest = reader.manifest
    for name in names:
        if name == _format.MANIFEST:
            continue
        entry = reader.expected(name)
        info = reader.info(name)
        if entry is None and name.endswith("/") and info.file_size == 0:
            # `zip -r` and zip explorers add folder entries when an unpacked archive is re-zipped.
            notes.append(f"folder entry `{name}` (added by a zip tool) holds nothing; ignored.")
            continue
        if manifest is not None and entry is None and name != _format.SIGNATURE:  # the signature comes after
            problems.append(f"member `{name}` is not listed in manifest.json (added after saving?).")
        crc, sha, size = 0, hashlib.sha256(), 0
        try:
            for piece in reader.iter_chunks(name):
                crc = zlib.crc32(piece, crc)
                sha.update(piece)
                size += len(piece)
        except ArchiveFormatError as err:
            problems.append(f"member `{name}`: {err.detail}")
            continue
        if crc != info.CRC:
            problems.append(f"member `{name}`: CRC-32 {crc:08x} differs from the zip directory's {info.CRC:08x}.")
        if entry is None:
            continue
        expected_size, expected_crc, expected_sha = entry.get("size"), entry.get("crc32"), entry.get("sha256")
        if expected_size != size:
            problems.append(f"member `{name}`: size {size} differs from manifest.json's {expected_size}.")
        if expected_crc is not None and expected_crc != f"{crc:08x}":
            problems.append(f"member `{name}`: CRC-32 {crc:08x} differs from manifest.json's {expected_crc}.")
        digest = sha.hexdigest()
        # Streamed members (tensors) are written without a SHA-256 by default (see
        # ArchiveWriter); their size and CRC-32 above are what the manifest promises.
        if expected_sha and expected_sha != digest:
            problems.append(f"member `{name}`: SHA-256 {digest} differs from manifest.json's {expected_sha}.")
    if manifest is not None:
        for name in sorted(set(manifest) - set(names)):
            problems.append(f"member `{name}` is listed in manifest.json but missing from the archive.")
    return problems


def _check_manifest_header(reader: ArchiveReader) -> list[str]:
    raw = reader.read(_format.MANIFEST, limit=reader.limits.max_json_bytes, verify=False)
    head = _json.loads(
        raw, max_depth=reader.limits.max_json_depth, limits=reader.limits
    )  # parsed by the reader already
    problems = []
    if head.get("format") != _format.FORMAT_NAME:
        problems.append(f"manifest.json names format {head.get('format')!r}, expected {_format.FORMAT_NAME!r}.")
    version = head.get("format_version")
    if type(version) is not int or not 1 <= version <= _format.FORMAT_VERSION:
        problems.append(
            f"manifest.json names format version {version!r}; this zipsave reads versions 1 to "
            f"{_format.FORMAT_VERSION}."
        )
    return problems
