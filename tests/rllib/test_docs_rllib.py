"""The examples of docs/rllib.rst run, in order, as the other pages' do (tests/test_docs_examples.py),
on a real local Ray. They start and stop their own Ray, so this file runs before the others."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import FILTER_WARNINGS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_docs_examples import ROOT, _run_console, _runnable  # noqa: E402

PAGE = ROOT / "docs" / "rllib.rst"
pytestmark = [pytest.mark.filterwarnings(w) for w in FILTER_WARNINGS]


def test_rllib_page_examples_run(tmp_path, monkeypatch, capsys):
    import ray

    assert not ray.is_initialized(), "run before the tests that share the session's Ray"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    blocks = _runnable(PAGE)
    assert len(blocks) >= 5
    for line, lang, code, _ in blocks:
        where = f"docs/rllib.rst:{line}"
        if lang == "python":
            exec(compile(code, where, "exec"), namespace)  # noqa: S102 - the docs' own examples
        else:
            _run_console(code, where, tmp_path)
    assert not ray.is_initialized()
    capsys.readouterr()
    assert os.path.exists(tmp_path / "converted.zip")
