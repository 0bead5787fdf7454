"""The ``zipsave`` command's words for a fix: a hint written for a Python caller names an option
of zipsave's functions (``trusted=[...]``, ``custom_objects=``, ``allow_pickle=True``,
``limits=``, ``storage_options``, a file object); the command says its own option instead
(``--trust``), or, where it has none, what a Python caller would pass."""

from __future__ import annotations

import re

from .exceptions import ZipsaveError

__all__ = ["as_flags", "in_command_terms", "signature_note"]

#: A global a hint may hand back as an option to paste: dotted identifiers, nothing else.
_NAME = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?::[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)?"
_TRUST = rf"`trusted=\[(['\"])({_NAME})\1\]`"
_VALUE = r"`custom_objects=(\{[^`]*\})`"
_UNPICKLE = "`allow_pickle=True` only if you trust the archive completely"

#: (pattern, replacement) in order; each names an option of the Python functions. Compiled on
#: the first error (``re`` caches them): a command that succeeds pays nothing for them.
_RULES: tuple[tuple[str, str], ...] = (
    # UnsafeGlobalError's own hint: of its three ways, only trusting the name is the command's
    (
        rf"To allow it, pass {_TRUST}, replace the entry with {_VALUE}, or pass `allow_pickle=True` if you "
        r"trust the archive completely\.",
        r"To allow it, pass `--trust \2` (which imports it) if you trust it.",
    ),
    (_TRUST, r"`--trust \2`"),
    (r"`trusted=` cannot", "`--trust` cannot"),
    (
        rf"Replace the entry with {_VALUE}, or pass `allow_pickle=True` (?:only )?if you trust the archive "
        r"completely\.",
        rf"The `zipsave` command never runs it; a load in Python can take the value from "
        rf"`custom_objects=\1` instead, or unpickle it with {_UNPICKLE}.",
    ),
    (
        rf"Pass the value with {_VALUE} \(built with the class imported\), or define the class in an importable "
        r"module and save again; `allow_pickle=True` only if you trust the archive completely\.",
        rf"Define the class in an importable module and save again; a load in Python can take the value from "
        rf"`custom_objects=\1` (built with the class imported) instead, or unpickle it with {_UNPICKLE}.",
    ),
    (rf"Consider using {_VALUE} to replace it\.", r"A load in Python can take the value from `custom_objects=\1`."),
    (
        r"(?:Raise it with|If you trust the archive, raise (?:it|them):) `limits=(zipsave\.Limits\([^`]*\))`"
        r"(?: if you trust the archive)?(?: \(`zipsave\.sb3\.install\(limits=\.\.\.\)` for SB3's own load "
        r"functions\))?\.",
        r"The `zipsave` command reads within the default limits; if you trust the archive, read it in Python "
        r"with `limits=\1`.",
    ),
    (r"Check the path, or pass an open binary file object\.", "Check the path."),
    (
        r"Check the URL and the credentials or `storage_options` it needs\.",
        "Check the URL and the credentials it needs: the command passes no `storage_options`, so its "
        "filesystem reads them from the environment or its configuration files.",
    ),
    (r"`zipsave\.load_archive` reads it", "`zipsave.load_archive` in Python reads it"),
    # the signature check: the command's signer options stand for a Trust that requires a signature
    (
        r"or load it with `Trust\(\.\.\., required=False\)` to accept unsigned archives\.",
        "or leave out the signer options (--public_key, --certificate_chain, --identity) for an unsigned archive.",
    ),
    (r" \(Trust\(\w+=\.\.\.\)\)", ""),
)
#: What is left of a Python call once the rules ran: said to be one.
_PYTHON_ONLY = (
    r"`(?:custom_objects|allow_pickle|trusted|limits|storage_options|cls|exact_match|strict|device)=|"
    r"\bpass `?(?:custom_objects|allow_pickle|trusted|limits|cls)="
)


def in_command_terms(err: ZipsaveError) -> None:
    """Say ``err``'s hint (zipsave's own words, not the archive's) in the command's terms, in place."""
    if not err.hint:
        return
    hint = err.hint
    for pattern, replacement in _RULES:
        hint = re.sub(pattern, replacement, hint)
    if hint == err.hint and re.search(_PYTHON_ONLY, hint):  # a hint no rule knows: said to be Python's
        hint = f"In Python: {hint}"
    if hint != err.hint:
        err.hint = hint
        err.args = (err._compose(),)


def signature_note(note: str | None) -> str | None:
    """``ArchiveInfo.signature`` as the command says it: checked with its signer options."""
    if note is None:
        return None
    return note.replace(
        "(inspect with trust= or run `zipsave verify` to check it)",
        "(give --public_key, --certificate_chain or --identity to check it)",
    )


#: The signer's fields, each the ``zipsave sign`` option of the same name.
_SIGNER_FIELD = r"\b(private_key|signing_certificate|certificate_chain|identity_token|sigstore)=(?:True\b)?"


def as_flags(text: str) -> str:
    """A refusal of :class:`~zipsave.Signer`'s arguments, its fields said as ``zipsave sign``'s
    options (``signing_certificate= needs certificate_chain=`` -> ``--signing_certificate needs
    --certificate_chain``)."""
    return re.sub(_SIGNER_FIELD, r"--\1", text)
