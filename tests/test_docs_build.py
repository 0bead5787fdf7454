"""The documentation builds with warnings as errors (``-n -W``), and the API page documents
every public name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import zipsave

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_api_page_documents_every_public_name():
    text = (DOCS / "api.rst").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\.\. (?:auto\w+|data|function|class|exception):: (\w+)", text, flags=re.MULTILINE))
    missing = sorted(set(zipsave.__all__) - documented)
    assert not missing, f"docs/api.rst does not document {missing}"


def test_toctree_lists_every_page():
    index = (DOCS / "index.rst").read_text(encoding="utf-8")
    pages = {p.stem for p in DOCS.glob("*.rst")} - {"index"}
    listed = set(re.findall(r"^   (\w+)$", index, flags=re.MULTILINE))
    assert pages <= listed, f"pages missing from the toctree: {sorted(pages - listed)}"


def test_docs_build_without_warnings(tmp_path: Path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-n",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(tmp_path / "doctrees"),
            str(DOCS),
            str(tmp_path / "html"),
        ],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr or done.stdout
    assert (tmp_path / "html" / "format.html").is_file()
    # Every public class shows its constructor with its defaults, CheckpointManager (whose
    # __new__ picks the read-only view) and Limits included.
    api = re.sub(r"<[^>]+>", "", (tmp_path / "html" / "api.html").read_text(encoding="utf-8"))
    api = api.replace("&#8217;", "'").replace("\u2019", "'")
    assert "CheckpointManager(directory, *, keep_last=None" in api
    assert "background=True" in api
    assert f"Limits(max_members={zipsave.Limits().max_members}" in api
