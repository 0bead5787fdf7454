"""The house rules of docs/architecture.rst, checked on the source: small modules that say their
concern, no private name imported across modules, no function-local import of zipsave code,
one options record for every load-like verb, and the layer contracts (import-linter)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import pathlib
import subprocess
import sys

import pytest

import zipsave
from zipsave._core import LoadOptions

PACKAGE = pathlib.Path(zipsave.__file__).parent
MODULES = sorted(p for p in PACKAGE.rglob("*.py"))
MAX_LINES = 420


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(path: pathlib.Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_is_small_and_says_its_concern(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name} has {len(text.splitlines())} lines"
    doc = ast.get_docstring(ast.parse(text))
    assert doc and doc.strip(), f"{path} has no module docstring"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_name_crosses_modules(path):
    """``from .x import _name`` only for a private *module*, never a private function or class."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = _resolve(path, node)
        if not source.startswith("zipsave"):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                assert importlib.util.find_spec(f"{source}.{alias.name}") is not None, (
                    f"{path.relative_to(PACKAGE)} imports the private name `{alias.name}` from `{source}`"
                )


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_function_local_import_of_zipsave(path):
    """Function-local imports of zipsave's own modules are how import cycles hide."""
    tree = ast.parse(path.read_text())
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.ImportFrom) and _resolve(path, node).startswith("zipsave"):
                pytest.fail(f"{path.relative_to(PACKAGE)}:{node.lineno} imports zipsave code inside `{func.name}`")
            if isinstance(node, ast.Import) and any(a.name.startswith("zipsave") for a in node.names):
                pytest.fail(f"{path.relative_to(PACKAGE)}:{node.lineno} imports zipsave code inside `{func.name}`")


@pytest.mark.parametrize("verb", [zipsave.load, zipsave.restore, zipsave.load_archive], ids=lambda f: f.__name__)
def test_load_verbs_take_every_option_with_its_one_default(verb):
    params = inspect.signature(verb).parameters
    for name, default in LoadOptions.DEFAULTS.items():
        assert name in params, f"{verb.__name__} lacks the option `{name}`"
        assert params[name].default == default, f"{verb.__name__}: default of `{name}` drifted"
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY


def test_load_options_defaults_are_its_constructors():
    # LoadOptions is written out (not a dataclass): its table of defaults, its constructor and
    # the instance it makes agree, so the verbs' check above checks the constructor's too
    params = inspect.signature(LoadOptions).parameters
    assert {n: p.default for n, p in params.items()} == LoadOptions.DEFAULTS
    made = LoadOptions()
    assert {n: getattr(made, n) for n in LoadOptions.DEFAULTS} == LoadOptions.DEFAULTS
    with pytest.raises(AttributeError):
        made.strict = True


def test_saveable_save_accepts_every_option_of_save(tmp_path):
    class Algo(zipsave.Saveable):
        def __init__(self):
            self.w = 1.0

    for name, param in inspect.signature(zipsave.save).parameters.items():
        if param.kind is inspect.Parameter.KEYWORD_ONLY and name not in ("background",):
            Algo().save(tmp_path / "a.zip", **{name: param.default})
    assert Algo.load(tmp_path / "a.zip").w == 1.0


def test_importing_zipsave_imports_no_integration_library():
    code = (
        "import sys, zipsave; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('stable_baselines3', 'sb3_contrib', 'rl_zoo3', 'ray') or m.startswith('torch.distributed.checkpoint')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_layer_contracts_hold():
    result = subprocess.run(
        [sys.executable, "-m", "importlinter.cli"], capture_output=True, text=True, cwd=PACKAGE.parent
    )
    assert result.returncode == 0, result.stdout[-3000:]
