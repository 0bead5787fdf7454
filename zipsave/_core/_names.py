"""Which keys can name an archive member or folder: checked when saving, so that nothing is
written that a load would refuse, lose, or read as another member."""

from __future__ import annotations

from typing import Any

from .. import _format
from .._archive import check_member_name
from ..exceptions import EncodeError, ZipsaveError

__all__ = ["check_key", "check_names", "check_text", "name_problem", "names_member"]

#: Members of a folder whose names a state-dict member must not take (``tensors.pth`` is the
#: legacy name of ``pytorch_variables.pth``, which readers take for it).
_TAKEN = frozenset({_format.PYTORCH_VARIABLES, _format.LEGACY_PYTORCH_VARIABLES})

#: The longest name most file systems allow (ext4, APFS: 255 bytes; NTFS: 255 UTF-16 units).
_MAX_NAME_BYTES = 255

_SEPARATOR = (
    "`/` separates folders in a zip: {what} would be read as inside another folder, and the value not found on load"
)
_CHARACTERS = {
    "/": _SEPARATOR,
    "\\": "Windows zip tools read `\\` as a folder separator, and would extract {what} into a folder",
    ":": (
        "Windows reads `:` as a drive (`C:`) or a stream of a file: zip readers, zipsave's among them, refuse "
        "a drive-qualified member, and Windows zip tools cannot extract {what}"
    ),
}

#: Why a name the archive reader refuses cannot be written.
_READER = ("zip readers, zipsave's among them, refuse such a name", "Use a plain name.")


_NOT_TEXT = (
    "the key is not valid UTF-8 text (it holds a lone surrogate, which `os.fsdecode` and `errors='surrogateescape'` "
    "make of undecodable bytes), and names in a zip and in `data` are UTF-8",
    "Use a key of valid text: decode the bytes it came from with their encoding, or with `errors='replace'`.",
)


def check_text(key: str, *, member: str | None = None) -> None:
    """Refuse, before anything is written, a key that is not UTF-8 text (a lone surrogate):
    it can name no member and no ``data`` entry."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise EncodeError(f"{_NOT_TEXT[0]}; nothing was written.", member=member, key=key, hint=_NOT_TEXT[1]) from None


def _bad_character(key: str) -> str | None:
    for ch in key:
        if ch in _CHARACTERS or ord(ch) < 0x20 or ord(ch) == 0x7F:
            return ch
    return None


def name_problem(key: str, *, folder: bool = False, prefix: str = "", portable: bool = True) -> tuple[str, str] | None:
    """Why ``key`` cannot name a ``.pth`` member of its own (``folder``: a component folder),
    and how to fix it, or ``None`` when it can: a name the archive reader accepts as one file
    of the folder (no ``/``), in UTF-8, and none of the folder's fixed members. ``portable``
    also asks for a name every zip tool extracts on every file system (no ``\\``, ``:`` or
    control character, at most 255 bytes, not empty): where zipsave chooses to write a member
    (a state dict given as a value, else kept in ``data``), not where it refuses a save that
    zipsave reads back (a module under ``"agent:0"`` saved and loaded before this check).
    ``prefix``: the attribute path the key sits under (``nets.``)."""
    name = prefix + key if folder else _format.state_dict_member(prefix + key)
    what = f"the folder `{name}/`" if folder else f"the member `{name}`"
    try:
        size = len(name.rpartition("/")[2].encode("utf-8"))
    except UnicodeEncodeError:
        return _NOT_TEXT
    if not key and (portable or folder):
        return f"an empty key leaves {what} with no name", "Give it a name."
    if folder and key in (".", ".."):
        return (
            f"`{key}` names {'this folder' if key == '.' else 'the folder above'} in a path: zip readers, zipsave's among "
            "them, refuse `..` as leaving the archive, and extract `./data` over the archive's own `data`",
            "Use a name other than `.` or `..`.",
        )
    bad = _bad_character(key)
    if bad is not None and (
        portable or bad == "/" or not _loads(name if not folder else _format.join(name, _format.DATA))
    ):
        why = _CHARACTERS.get(bad, "zip tools cut {what} short at a control character ({char}), or cannot extract it")
        fixed = "".join("_" if _bad_character(ch) else ch for ch in key)
        return (
            why.format(what=what, char=repr(bad)),
            f"Use a key without it, e.g. `{fixed!r}`.",
        )
    if name in _TAKEN and not folder:
        owner = (
            "the folder's member for loose tensors"
            if name == _format.PYTORCH_VARIABLES
            else "the old name of `pytorch_variables.pth`, which loaders (SB3's, `zipsave.load_archive`) read as the "
            "loose tensors"
        )
        return f"`{name}` is {owner}", f"Rename the key, e.g. `{key + '_state'!r}`."
    if size > _MAX_NAME_BYTES and portable:
        return (
            f"{what} would be {size} bytes long, more than the {_MAX_NAME_BYTES} most file systems allow in a name",
            "Use a shorter key.",
        )
    return None if _loads(_format.join(name, _format.DATA) if folder else name) else _READER


def names_member(key: str) -> bool:
    """Whether an app-state key can name a ``.pth`` member of its own (:func:`name_problem`)."""
    return name_problem(key) is None


def check_key(key: str, value: Any, *, folder: bool = False, prefix: str = "") -> None:
    """Refuse, before anything is written, a key that cannot name the member or folder of the
    stateful ``value`` it holds so that zipsave reads it back (:func:`name_problem`, not
    ``portable``)."""
    problem = name_problem(key, folder=folder, prefix=prefix, portable=False)
    if problem is not None:
        _refuse(prefix + key, value, problem, folder=folder)


def check_names(state: list[tuple[str, Any]], components: list[tuple[str, Any]], folder: str) -> None:
    """Refuse, before anything is written, a member or folder name that a load would refuse
    or not find (a ``Saveable``'s attribute, an integration's name, ``save_archive``'s
    ``params``). Laxer than :func:`name_problem`: such names have always been written as they
    are where every zip reader reads them."""
    for name, value in state:
        member = _format.state_dict_member(name)
        if "/" in name or member in _TAKEN or not _loads(_format.join(folder, member)):
            _refuse(name, value, name_problem(name) or _READER, folder=False)
    for name, value in components:
        if not _loads(_format.join(_format.join(folder, name), _format.DATA)):
            parts = [name_problem(part, folder=True) for part in name.split("/")]
            _refuse(name, value, next((p for p in parts if p is not None), _READER), folder=True)


def _loads(member: str) -> bool:
    """Whether the archive reader accepts the member name ``member``."""
    try:
        member.encode("utf-8")
        check_member_name(member, None)
    except (UnicodeEncodeError, ZipsaveError):
        return False
    return True


def _refuse(key: str, value: Any, problem: tuple[str, str], *, folder: bool) -> None:
    kind = "the folder" if folder else "the `.pth` member"
    what = f"{type(value).__module__}.{type(value).__qualname__}"
    raise EncodeError(
        f"cannot name {kind} of the {what} it holds: {problem[0]}; nothing was written.",
        key=key,
        hint=problem[1],
    )
