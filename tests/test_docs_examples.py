"""Every code example in README.rst and docs/*.rst runs.

Each page's ``.. code-block:: python`` blocks run in order in one fresh namespace, in a
temporary working folder, as a reader would paste them into a notebook. ``$ zipsave ...``
lines of ``.. code-block:: console`` blocks run through ``python -m zipsave`` (forked from one
server that imported it, tests/cli_server.py) in the same folder and must not fail (exit
status 2). A block directly preceded by the comment ``.. skip-example`` is not run; keep those
rare (URLs of real remote storage and the like).
"""

from __future__ import annotations

import os
import re
import shlex
import textwrap
from pathlib import Path

import cli_server
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.rst", *sorted((ROOT / "docs").glob("*.rst"))]
# Pages whose examples need an extra with its own venv; that venv's tests run them
# (docs/rllib.rst: tests/rllib/test_docs_rllib.py).
OWN_VENV_PAGES = {ROOT / "docs" / "rllib.rst"}
# Pages whose examples need a module that an extra installs: where it cannot be imported (the
# lowest stack's botocore pins urllib3 < 2, which model-signing's stack cannot use), the page
# skips as tests/test_sign.py does.
NEEDS_MODULE = {ROOT / "docs" / "signing.rst": "model_signing"}
_DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\. code-block:: (?P<lang>\S+)[ \t]*$")
_SKIP = ".. skip-example"


def extract_blocks(text: str) -> list[tuple[int, str, str, bool]]:
    """``(line number, language, code, skipped)`` of every ``code-block`` in an rst text."""
    lines = text.splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = _DIRECTIVE.match(lines[i])
        if not match:
            i += 1
            continue
        start = i
        previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        indent = len(match["indent"])
        i += 1
        while i < len(lines) and re.match(r"^\s+:\w[\w-]*:", lines[i]):  # directive options
            i += 1
        body = []
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        code = textwrap.dedent("\n".join(body)).strip("\n") + "\n"
        blocks.append((start + 1, match["lang"], code, previous == _SKIP))
    return blocks


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_extract_blocks_reads_options_skips_and_nesting():
    text = textwrap.dedent(
        """\
        Title

        .. code-block:: python
           :caption: one

           x = 1

           y = x + 1

        .. skip-example

        .. code-block:: python

            raise SystemExit("must not run")

        * a list item:

          .. code-block:: console

             $ zipsave --help
        after
        """
    )
    blocks = extract_blocks(text)
    assert [(lang, skipped) for _, lang, _, skipped in blocks] == [
        ("python", False),
        ("python", True),
        ("console", False),
    ]
    assert blocks[0][2] == "x = 1\n\ny = x + 1\n"
    assert blocks[2][2] == "$ zipsave --help\n"


def test_every_page_is_collected():
    names = {_page_id(p) for p in PAGES}
    assert {"README.rst", "docs/usage.rst", "docs/format.rst", "docs/cli.rst"} <= names


def _runnable(page: Path) -> list[tuple[int, str, str, bool]]:
    return [b for b in extract_blocks(page.read_text(encoding="utf-8")) if b[1] in ("python", "console") and not b[3]]


@pytest.mark.parametrize("page", [p for p in PAGES if _runnable(p) and p not in OWN_VENV_PAGES], ids=_page_id)
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    if page in NEEDS_MODULE:
        pytest.importorskip(NEEDS_MODULE[page])
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    for line, lang, code, _ in _runnable(page):
        where = f"{_page_id(page)}:{line}"
        if lang == "python":
            exec(compile(code, where, "exec"), namespace)  # noqa: S102 - the docs' own examples
        else:
            _run_console(code, where, tmp_path)
    capsys.readouterr()


def _run_console(code: str, where: str, cwd: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for command in code.splitlines():
        if not command.startswith("$ "):
            continue
        argv = shlex.split(command[2:])
        assert argv[0] == "zipsave" and not {"|", ">", "&&"} & set(argv), f"{where}: run only plain `zipsave` commands"
        done = cli_server.run(argv[1:], env=env, cwd=cwd)  # `python -m zipsave`, forked (cli_server.py)
        assert done.returncode in (0, 1), f"{where}: `{command[2:]}` exited {done.returncode}: {done.stderr}"
        assert "Traceback" not in done.stderr, f"{where}: {done.stderr}"
