"""The ``system_info.txt`` member: the versions a model was saved with, in SB3's line format,
and the differences from the loading machine that can break or change a load."""

from __future__ import annotations

import os
import platform
import re
import sys
from importlib import metadata
from typing import TextIO

from ._distributions import folder_parts, metadata_folders, normalized
from ._printable import visible
from ._version import __version__

__all__ = [
    "compare_system_info",
    "format_system_info",
    "get_system_info",
    "parse_system_info",
    "print_system_info",
]

# Versions read from installed metadata: importing gymnasium or SB3 only to ask their version
# would cost seconds and run their import-time code.
_DISTRIBUTIONS = (
    ("Numpy", "numpy"),
    ("Cloudpickle", "cloudpickle"),
    ("Gymnasium", "gymnasium"),
    ("orjson", "orjson"),
    ("Stable-Baselines3", "stable-baselines3"),
)

# (key, release parts that must match, what a difference can break)
_RULES = (
    ("Python", 2, "pickled functions and code objects may not load"),
    ("Numpy", 1, "pickled numpy objects may not load across numpy major versions"),
    (
        "PyTorch",
        2,
        "tensors saved by a newer torch may not load, and results may differ",
    ),
    (
        "Gymnasium",
        2,
        "pickled spaces may not load, and environments may behave differently",
    ),
    ("Cloudpickle", 1, "pickled functions may not load"),
)

_RELEASE = r"\s*v?(\d+)(?:\.(\d+))?"
#: Digits of a release number compared as a number; longer ones are text.
_MAX_DIGITS = 18


def get_system_info() -> dict[str, str]:
    """Collect the versions that decide whether an archive loads here.

    Returns
    -------
    dict of str to str
        In this order: ``OS`` (platform and kernel version, ``#<digit>`` written ``# <digit>``
        as SB3 does so GitHub does not link issues), ``Python``, ``zipsave``, ``PyTorch``,
        ``GPU Enabled``, ``Numpy``, ``Cloudpickle``, ``Gymnasium``, ``orjson``, and
        ``Stable-Baselines3`` when it is installed. A package that is not installed is left
        out. Only torch is imported (for its CUDA check); the other versions come from the
        installed package metadata.

    Examples
    --------
    >>> info = get_system_info()
    >>> list(info)[:3]
    ['OS', 'Python', 'zipsave']
    """
    import torch  # a zipsave requirement, imported here so parsing a file does not need it

    info = {
        "OS": re.sub(r"#(\d)", r"# \1", f"{_platform_text()} {platform.version()}"),
        "Python": platform.python_version(),
        "zipsave": __version__,
        "PyTorch": str(torch.__version__),
        "GPU Enabled": str(torch.cuda.is_available()),
    }
    listed = _listed_versions({normalized(distribution) for _, distribution in _DISTRIBUTIONS})
    for key, distribution in _DISTRIBUTIONS:
        version = listed.get(normalized(distribution), "") if listed is not None else ""
        if version is None:  # no distribution of that name along sys.path
            continue
        try:
            info[key] = version or _installed_version(distribution)
        except metadata.PackageNotFoundError:
            pass
    return info


_FILENAME_SAFE = str.maketrans({" ": "_", "/": "-", "\\": "-", ":": "-", ";": "-", '"': "-", "(": "-", ")": "-"})


def _platform_text() -> str:
    """``platform.platform()``, but on Linux without the processor, which it asks ``uname -p``
    for in a subprocess (about 2 ms of a first save): that is ``unknown`` or the machine's
    name on the usual distributions, both of which ``platform.platform()`` leaves out."""
    if platform.system() != "Linux":
        return platform.platform()
    uname = os.uname()
    libc, libc_version = platform.libc_ver()
    parts = (uname.sysname, uname.release, uname.machine, "with", libc + libc_version)
    text = "-".join(part.strip() for part in parts if part).translate(_FILENAME_SAFE).replace("unknown", "")
    while "--" in text:  # as platform.platform() cleans it
        text = text.replace("--", "-")
    return text.rstrip("-")


def _listed_versions(wanted: set[str]) -> dict[str, str | None] | None:
    """The version of each ``wanted`` distribution (normalized names) as the name of its
    ``.dist-info`` folder gives it (``numpy-2.4.6.dist-info``), the first along ``sys.path``
    winning as in ``importlib.metadata``: one ``listdir`` per folder where five metadata lookups
    took 3-4.5 ms of a first save. ``""`` where a folder's name does not say it unambiguously
    (an ``.egg-info``, two versions side by side: ask the metadata), ``None`` for one that is
    not installed; ``None`` for all where distributions may come from elsewhere (a zip on
    ``sys.path``, a finder of its own, an unpacked egg)."""
    folders = metadata_folders()
    if folders is None:
        return None
    found: dict[str, str | None] = {}
    for _, children in folders:
        here: dict[str, list[str]] = {}
        for child in children:
            name, version, suffix = folder_parts(child)
            if suffix == "dist-info" and ("-" in version or not version):
                return None  # not as installers write it (`name-version`): importlib.metadata's reading
            key = normalized(name)
            if key in wanted and key not in found:
                here.setdefault(key, []).append(version if suffix == "dist-info" else "")
        for key, versions in here.items():
            found[key] = versions[0] if len(versions) == 1 else ""
    return {key: found.get(key) for key in wanted}


def _installed_version(distribution: str) -> str:
    """``metadata.version(distribution)``, read from the metadata's header lines only:
    ``metadata.version`` parses the whole file as an e-mail, long description included (5 ms
    for orjson's, most of a first save of a small model)."""
    dist = metadata.distribution(distribution)
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    for line in text.partition("\n\n")[0].splitlines():  # the headers end at the first blank line
        if line[:8].lower() == "version:":
            return line[8:].strip()
    return dist.version


def format_system_info(info: dict[str, str]) -> str:
    """Write system info as SB3 does: one ``- {key}: {value}`` line per entry.

    Parameters
    ----------
    info : dict of str to str
        As returned by :func:`get_system_info`.

    Returns
    -------
    str
        The text, each line ending with a newline. A line break inside a value is written
        as a space so that every entry stays on one line.

    Examples
    --------
    >>> format_system_info({"Python": "3.11.7", "GPU Enabled": "False"})
    '- Python: 3.11.7\\n- GPU Enabled: False\\n'
    """
    lines = []
    for key, value in info.items():
        value = " ".join(str(value).splitlines())
        lines.append(f"- {key}: {value}\n")
    return "".join(lines)


def parse_system_info(text: str) -> dict[str, str]:
    """Read system info written by :func:`format_system_info` or by SB3.

    Parameters
    ----------
    text : str
        The content of ``system_info.txt``.

    Returns
    -------
    dict of str to str
        Keys and values in file order. The key ends at the first colon, so values may hold
        colons and ``#`` (SB3's OS line does). Blank lines and lines without a colon are
        ignored; a repeated key keeps its last value.

    Examples
    --------
    >>> parse_system_info("- OS: Linux-6.1.0 # 1 SMP 12:00\\n- Python: 3.11.7\\n")
    {'OS': 'Linux-6.1.0 # 1 SMP 12:00', 'Python': '3.11.7'}
    """
    info: dict[str, str] = {}
    for line in text.lstrip("\ufeff").splitlines():
        # SB3 writes "- key: value"; the key never holds a colon, the value (the OS line) may.
        # Split at the first colon rather than by a regular expression: a pattern whose key
        # part is matched lazily against the whitespace before the colon tries every split of a
        # long line without one (a 100 KB line of spaces took 35 s).
        head, colon, value = line.partition(":")
        key = head.strip()
        if key.startswith("-") and key[1:].strip():  # the list marker; a lone "-" is the key
            key = key[1:].strip()
        if colon and key:
            info[key] = value.strip()
    return info


def compare_system_info(saved: dict[str, str], current: dict[str, str]) -> list[str]:
    """Name the version differences that can stop an archive from loading or change it.

    Compared: Python (major.minor), Numpy (major), PyTorch (major.minor), Gymnasium
    (major.minor) and Cloudpickle (major). A key missing on either side is not a difference;
    a version that cannot be read as numbers differs when its text differs.

    Parameters
    ----------
    saved : dict of str to str
        The saved info, e.g. ``parse_system_info(text)``.
    current : dict of str to str
        The info of this machine, e.g. ``get_system_info()``.

    Returns
    -------
    list of str
        One sentence per difference, in the order above; empty when nothing matters.

    Examples
    --------
    >>> compare_system_info({"Python": "3.10.12"}, {"Python": "3.11.7"})
    ['Python differs: saved 3.10.12, current 3.11.7 (pickled functions and code objects may not load)']
    """
    differences = []
    for key, parts, consequence in _RULES:
        if key not in saved or key not in current:
            continue
        old, new = saved[key], current[key]
        old_release, new_release = _release(old, parts), _release(new, parts)
        if old_release is None or new_release is None:
            differs = old.strip() != new.strip()
        else:
            differs = old_release != new_release
        if differs:
            differences.append(f"{key} differs: saved {old}, current {new} ({consequence})")
    return differences


def print_system_info(saved_text: str | None, file: TextIO | None = None) -> None:
    """Print the saved and the current system info and the differences that matter.

    Parameters
    ----------
    saved_text : str or None
        The archive's ``system_info.txt``, or ``None`` if it has none.
    file : file-like, optional
        Where to print. Default ``None``: ``sys.stdout`` at the time of the call.

    Examples
    --------
    >>> print_system_info(None)  # doctest: +ELLIPSIS
    == SAVED MODEL SYSTEM INFO ==
    (the archive has no system_info.txt)
    == CURRENT SYSTEM INFO ==
    - OS: ...
    == DIFFERENCES THAT MATTER ==
    none
    """
    out = sys.stdout if file is None else file
    current = get_system_info()
    print("== SAVED MODEL SYSTEM INFO ==", file=out)
    if saved_text is None:
        print("(the archive has no system_info.txt)", file=out)
        differences = []
    else:
        # The archive's own text: its lines stay lines, every other control is made visible.
        print(visible(saved_text.rstrip("\n"), lines=True) or "(system_info.txt is empty)", file=out)
        differences = compare_system_info(parse_system_info(saved_text), current)
    print("== CURRENT SYSTEM INFO ==", file=out)
    print(format_system_info(current), end="", file=out)
    print("== DIFFERENCES THAT MATTER ==", file=out)
    for sentence in differences:
        print(f"- {visible(sentence)}", file=out)
    if not differences:
        print("none", file=out)


def _release(version: str, parts: int) -> tuple[int, ...] | None:
    match = re.match(_RELEASE, version)
    if match is None or max(len(match.group(1)), len(match.group(2) or "")) > _MAX_DIGITS:
        return None  # not a release number: compared as text (int() of 200 000 digits takes seconds)
    return (int(match.group(1)), int(match.group(2) or 0))[:parts]
