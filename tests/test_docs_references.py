"""Names the documentation quotes in double backquotes exist in the code: every
``zipsave.<name>`` it writes resolves, every file of the repository it names is there, and every
``--option`` the command's page names is one the command takes. (Sphinx checks the roles,
:func:`zipsave.x`; these are the literals it cannot see.)"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import re
from pathlib import Path

import pytest

import zipsave
from zipsave import _cli_parser, _format

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.rst", *sorted((ROOT / "docs").glob("*.rst"))]
# Literals that look like dotted names but name something else: the entry-point group of
# handlers and the embedded signature member.
NOT_NAMES = {"zipsave.handlers", "zipsave.sig"}


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attribute in parts[i:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_quoted_zipsave_name_exists(page: Path):
    text = page.read_text(encoding="utf-8")
    missing = [
        f"{_page_id(page)}:{_line(text, m.start())}: {m[1]}"
        for m in re.finditer(r"``(zipsave(?:\.[A-Za-z_]\w*)+)", text)
        if m[1] not in NOT_NAMES and not _resolves(m[1])
    ]
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_file_of_the_repository_a_page_names_exists(page: Path):
    text = page.read_text(encoding="utf-8")
    pattern = r"(?<![\w/.])((?:zipsave|tests|benchmarks|docs|\.ci)/[\w/.\-]*\w)"
    missing = [
        f"{_page_id(page)}:{_line(text, m.start())}: {m[1]}"
        for m in re.finditer(pattern, text)
        if not (ROOT / m[1]).exists() and "<" not in m[1]
    ]
    assert missing == []


def _options() -> dict[str, set[str]]:
    parser = _cli_parser.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    options = {name: {o for a in sub._actions for o in a.option_strings} for name, sub in commands.choices.items()}
    options[""] = {o for a in parser._actions for o in a.option_strings}
    return options


def test_every_option_the_command_page_names_is_taken_by_its_subcommand():
    """In docs/cli.rst each ``--option`` belongs to the subcommand of the section it is in
    (``zipsave read``'s section may name the signer options: ``read`` takes them too)."""
    options = _options()
    text = (ROOT / "docs" / "cli.rst").read_text(encoding="utf-8")
    wrong = []
    for section in re.split(r"\n(?=``zipsave \w+``\n-+\n)", text):
        heading = re.match(r"``zipsave (\w+)``", section)
        taken = options[heading[1]] if heading else set().union(*options.values())
        for m in re.finditer(r"(?<![\w-])(--[a-z][\w-]*)", section):
            mentioned_elsewhere = heading and re.search(rf"``zipsave (\w+)``[^\n]*{m[1]}", section)
            if m[1] not in taken | options[""] and not mentioned_elsewhere:
                wrong.append(f"{heading[1] if heading else 'intro'}: {m[1]}")
    assert wrong == []


def test_the_command_page_has_a_section_for_every_subcommand():
    text = (ROOT / "docs" / "cli.rst").read_text(encoding="utf-8")
    sections = set(re.findall(r"^``zipsave (\w+)``\n-+$", text, flags=re.MULTILINE))
    assert sections == set(_options()) - {""}


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_every_limit_a_page_names_is_a_field_of_limits(page: Path):
    fields = {field.name for field in dataclasses.fields(zipsave.Limits)}
    text = page.read_text(encoding="utf-8")
    unknown = [
        f"{_page_id(page)}:{_line(text, m.start())}: {m[1] or m[2]}"
        for m in re.finditer(r"Limits\.(\w+)|Limits\((\w+)=", text)
        if (m[1] or m[2]) not in fields
    ]
    assert unknown == []


def _documented_signatures() -> list[tuple[str, str, str]]:
    """``(module, name, arguments)`` of every signature docs/api.rst writes out by hand."""
    module, out = "zipsave", []
    for line in (ROOT / "docs" / "api.rst").read_text(encoding="utf-8").splitlines():
        if found := re.match(r"\.\. module:: (\S+)", line):
            module = found[1]
        elif found := re.match(r"\.\. (?:function|class|exception):: (\w+)\((.*)\)\s*$", line):
            out.append((module, found[1], found[2]))
    return out


@pytest.mark.parametrize("module,name,arguments", _documented_signatures(), ids=lambda v: v if "(" not in v else "")
def test_a_signature_written_in_api_rst_is_the_code_s(module: str, name: str, arguments: str):
    """Same parameters, in order, with the same defaults (a ``**kwargs`` that only turns SB3's
    own argument names into a clear error may go unlisted)."""
    signature = inspect.signature(getattr(importlib.import_module(module), name))
    written = [a.strip() for a in arguments.split(",") if a.strip() not in ("", "*", "/")]
    names = [a.split("=")[0].lstrip("*") for a in written]
    real = [
        p
        for p in signature.parameters.values()
        if p.name != "self" and (p.kind is not p.VAR_KEYWORD or p.name in names)
    ]
    assert names == [p.name for p in real]
    for argument, parameter in zip(written, real):
        if "=" in argument:  # (one written without a default may default to None to say it is missing)
            assert argument.split("=", 1)[1] == repr(parameter.default), argument


def test_the_architecture_tree_names_every_module_and_package():
    """docs/architecture.rst's tree names every top-level module and package of zipsave."""
    text = (ROOT / "docs" / "architecture.rst").read_text(encoding="utf-8")
    tree = text[text.index("    zipsave/\n") : text.index("\nLayers\n")]
    names = {
        path.name for path in (ROOT / "zipsave").iterdir() if path.suffix == ".py" or (path / "__init__.py").exists()
    }
    assert sorted(name for name in names if not re.search(rf"(?<![\w.]){re.escape(name)}", tree)) == []


def test_the_format_page_specifies_the_version_zipsave_writes():
    text = (ROOT / "docs" / "format.rst").read_text(encoding="utf-8")
    assert text.startswith(f"The archive format (version {_format.FORMAT_VERSION})\n")
    assert f"this page specifies version **{_format.FORMAT_VERSION}**" in text


@pytest.mark.parametrize(
    "page", [p for p in PAGES if p.parent.name == "docs" and p.stem not in ("index", "changelog")], ids=_page_id
)
def test_a_page_says_whom_it_is_for_on_its_first_screen(page: Path):
    """A reader arriving with one question learns within the first lines whether it is the
    page (index.rst routes by question; changelog.rst is per version)."""
    first_screen = "\n".join(page.read_text(encoding="utf-8").splitlines()[:15])
    assert "This page is for" in first_screen
