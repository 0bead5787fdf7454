"""Every figure in docs/benchmarks.rst is traceable: each decimal number of a section appears
in the results files under ``benchmarks/results/`` that the section cites."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.rst"
RESULTS = ROOT / "benchmarks" / "results"

# A decimal figure: not part of a version (2.13.0), a date, a name or an address.
_FIGURE = re.compile(r"(?<![\w.\-/])(\d+\.\d+)(?![\w.]*\d)(?!\.\w)")
# Versions of the machine's software, stated beside their package name, are not figures.
_VERSION = re.compile(r"\b(?:Python|torch|SB3|numpy|safetensors|isal|gymnasium|Ray|RLlib|CPython)\s+\d+(?:\.\d+)+")


def _sections(text: str) -> list[tuple[str, str]]:
    """(title, body) for each section at any level."""
    lines = text.splitlines()
    starts = [
        i - 1 for i in range(1, len(lines)) if re.fullmatch(r"([=\-~^])\1{3,}", lines[i]) and lines[i - 1].strip()
    ]
    out = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        out.append((lines[start], "\n".join(lines[start + 2 : end])))
    return out


def _cited(body: str) -> list[Path]:
    names = re.findall(r"benchmarks/results/([\w.\-/]+\w)", body)
    files = []
    for name in names:
        path = RESULTS / name
        if path.is_dir():  # a run's folder, named as its output: every file of it
            files.extend(sorted(p for p in path.iterdir() if p.is_file()))
            continue
        files.append(path)
        if path.suffix == ".txt" and path.with_suffix(".json").exists():
            files.append(path.with_suffix(".json"))
    return files


def _numbers_of_json(value: object) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers_of_json(v)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers_of_json(v)]
    return []


def _traced(figure: str, files: list[Path]) -> bool:
    decimals = len(figure.split(".")[1])
    for path in files:
        text = path.read_text(encoding="utf-8")
        if re.search(rf"(?<![\d.]){re.escape(figure)}(?!\d)", text):
            return True
        if path.suffix == ".json":
            for value in _numbers_of_json(json.loads(text)):
                # a time in seconds, or its milliseconds, rounded as the page shows it
                if any(f"{v:.{decimals}f}" == figure for v in (value, value * 1000)):
                    return True
    return False


def test_the_page_opens_with_a_summary_table() -> None:
    titles = [title for title, _ in _sections(PAGE.read_text(encoding="utf-8"))]
    assert titles[:2] == ["Benchmarks", "At a glance"], titles[:3]


def test_the_page_cites_no_file_outside_the_repository() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "PERF_NOTES" not in text
    for name in re.findall(r"benchmarks/results/([\w.\-/]+\w)", text):
        assert (RESULTS / name).exists(), f"docs/benchmarks.rst cites {name}, which is not under benchmarks/results/"


@pytest.mark.parametrize(
    "title,body", _sections(PAGE.read_text(encoding="utf-8")), ids=lambda v: v[:40] if isinstance(v, str) else v
)
def test_every_figure_of_a_section_is_in_the_results_it_cites(title: str, body: str) -> None:
    prose = _VERSION.sub("", body)
    prose = re.sub(r"^\.\. literalinclude::.*$", "", prose, flags=re.MULTILINE)
    figures = sorted(set(_FIGURE.findall(prose)))
    if not figures:
        return
    files = _cited(body)
    assert files, f"section {title!r} gives figures {figures[:5]} but cites no file under benchmarks/results/"
    untraced = [f for f in figures if not _traced(f, files)]
    assert not untraced, f"section {title!r}: {untraced} appear in none of {[p.name for p in files]}"
