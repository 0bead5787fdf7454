"""setup.cfg promises only what CI tests: every declared floor is pinned in the lowest stack's
constraints file (.ci/constraints-lowest.txt), which `.ci/stack lowest` installs and tests
in CI (.ci/run), as it does the mid-range stack."""

from __future__ import annotations

import configparser
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Extras a user installs (runtime) or the suite needs; `docs` and `bench` are maintainers' tools.
TESTED_EXTRAS = ("remote", "progress", "test")


def _requirements() -> list[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines()
    for extra in TESTED_EXTRAS:
        lines += cfg["options.extras_require"][extra].splitlines()
    return [line.strip() for line in lines if line.strip()]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / "constraints-lowest.txt").read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.split("#")[0].strip())
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_every_floor_is_the_pinned_lowest_version():
    pins = _pins()
    for requirement in _requirements():
        # An environment marker (`; platform_machine == ...`) narrows where it applies, not the floor.
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?>=([0-9][^,;\s]*)", requirement.split(";")[0].strip())
        assert match, f"setup.cfg: `{requirement}` must be `name>=floor` (a floor CI can pin)"
        name, floor = match.group(1).lower(), match.group(2)
        assert pins.get(name) == floor, f"setup.cfg says {name}>={floor}; constraints-lowest pins {pins.get(name)}"


def test_classifiers_name_only_the_pythons_ci_tests():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    versions = re.findall(r"Programming Language :: Python :: (3\.\d+)", cfg["metadata"]["classifiers"])
    assert versions == ["3.11", "3.12", "3.13"]
    assert cfg["options"]["python_requires"] == ">=3.11"
    pythons = (ROOT / ".ci" / "pythons").read_text()
    assert f'PYTHONS="{" ".join(versions)}"' in pythons  # each gets the release check
    run = (ROOT / ".ci" / "run").read_text()
    # .ci/run runs what `.ci/pythons ci` runs: the suite on 3.13 but the process suites, the
    # by-Python suites on 3.12 (beside the stacks), then the release check of every Python
    for step in (".ci/pythons but-process 3.13", ".ci/pythons by-python 3.12", ".ci/pythons release"):
        assert step in run, f".ci/run does not run `{step}`"
    tox = configparser.ConfigParser()
    tox.read(ROOT / "tox.ini")
    assert [e.strip() for e in tox["tox"]["envlist"].split(",")][:3] == [f"py{v.replace('.', '')}" for v in versions]


def test_ci_runs_the_suite_on_every_stack_the_readme_names():
    run = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.rst").read_text()
    for stack in ("lowest", "mid"):
        assert f".ci/stack {stack}" in run, f".ci/run does not run the {stack} stack"
        assert f"**{stack}**" in readme and (ROOT / ".ci" / f"constraints-{stack}.txt").is_file()
    assert run.index("python -m pytest") < run.index(".ci/stack lowest")  # the README's command comes first
