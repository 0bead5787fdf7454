"""Hints that reach the ``zipsave`` command's output name its own options (``--trust``), or say
what a Python call would pass where the command has none; Python callers keep the Python form."""

from __future__ import annotations

import pathlib
import re
import warnings

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import zipsave
from zipsave import cli
from zipsave._cli_hints import in_command_terms

HOSTILE = pathlib.Path(__file__).parent / "data" / "hostile"
#: A Python option said as something the command takes: what no command line may show bare.
PYTHON_FORMS = ("`trusted=[", "pass `allow_pickle", "Raise it with `limits", "raise them: `limits", "file object")


def _command_error(capsys, *argv) -> str:
    assert cli.main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zipsave: error: ") and err.count("\n") == 1, err
    return err


def _python_error(call) -> str:
    with pytest.raises(zipsave.ZipsaveError) as caught:
        call()
    return str(caught.value)


def test_a_global_that_runs_code_names_no_option_of_python_to_the_command(capsys):
    path = HOSTILE / "pickle_os_system.zip"
    line = _command_error(capsys, "read", path, "evil")
    assert "The `zipsave` command never runs it; a load in Python can take the value from " in line
    assert "`custom_objects={'evil': ...}` instead, or unpickle it with `allow_pickle=True` only if" in line
    assert not any(form in line for form in PYTHON_FORMS) and "--trust" not in line
    python = _python_error(lambda: zipsave.read(path, "evil"))
    assert "Replace the entry with `custom_objects={'evil': ...}`, or pass `allow_pickle=True` only if" in python


def test_a_class_stored_as_code_names_the_command_option_that_cannot_admit_it(tmp_path, capsys):
    def make():
        class Local:
            pass

        return Local()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the save warns that the class is stored by value
        zipsave.save({"v": make()}, tmp_path / "v.zip")
    line = _command_error(capsys, "read", tmp_path / "v.zip", "v")
    assert "so `--trust` cannot admit it. Define the class in an importable module and save again; a load in " in line
    assert not any(form in line for form in PYTHON_FORMS) and "`trusted=`" not in line
    assert "so `trusted=` cannot admit it. Pass the value with" in _python_error(
        lambda: zipsave.read(tmp_path / "v.zip", "v")
    )


def test_a_limit_says_the_command_keeps_the_defaults(capsys):
    path = HOSTILE / "deep_json.zip"
    line = _command_error(capsys, "read", path, "x")
    assert line.rstrip().endswith(
        "The `zipsave` command reads within the default limits; if you trust the archive, read it in Python "
        "with `limits=zipsave.Limits(max_json_depth=...)`."
    )
    line = _command_error(capsys, "diff", path, HOSTILE / "valid.zip")
    assert "the default limits" in line and "Raise it with" not in line
    assert "Raise it with `limits=zipsave.Limits(max_json_depth=...)`" in _python_error(lambda: zipsave.read(path, "x"))


def test_a_missing_archive_is_not_told_to_pass_a_file_object(tmp_path, capsys):
    line = _command_error(capsys, "inspect", tmp_path / "gone.zip")
    assert line.rstrip().endswith("no such file (also tried with a `.zip` suffix). Check the path.")
    assert "or pass an open binary file object" in _python_error(lambda: zipsave.inspect(tmp_path / "gone.zip"))


class _Refusing(MemoryFileSystem):
    protocol = "zsrefuse"

    def _open(self, path, mode="rb", **kwargs):
        raise RuntimeError("Unable to locate credentials")


def test_a_filesystem_that_refuses_is_a_storage_error_naming_the_credentials(capsys):
    # botocore's NoCredentialsError reached the command as "unexpected ... please report this as a zipsave bug"
    fsspec.register_implementation("zsrefuse", _Refusing, clobber=True)
    message = _python_error(lambda: zipsave.inspect("zsrefuse://bucket/model.zip"))
    assert message == (
        "archive `zsrefuse://bucket/model.zip`: could not be opened (RuntimeError: Unable to locate credentials). "
        "Check the URL and the credentials or `storage_options` it needs."
    )
    line = _command_error(capsys, "inspect", "zsrefuse://bucket/model.zip")
    assert "(RuntimeError: Unable to locate credentials). Check the URL and the credentials it needs: the " in line
    assert "report this as a zipsave bug" not in line


def test_an_unchecked_signature_names_the_command_options(tmp_path, capsys):
    zipsave.save({"step": 1}, tmp_path / "m.zip")
    (tmp_path / "m.zip.sig").write_text("{}")
    assert cli.main(["inspect", str(tmp_path / "m.zip")]) == 0
    assert "not checked (give --public_key, --certificate_chain or --identity to check it)" in capsys.readouterr().out
    assert "(inspect with trust= or run `zipsave verify` to check it)" in zipsave.inspect(tmp_path / "m.zip").signature


def test_a_trust_value_that_names_no_global_is_a_usage_error(tmp_path, capsys):
    # it was "unexpected ValueError ... (pass `allow_pickle=True` to trust everything). (please report this as a
    # zipsave bug)"
    zipsave.save({"step": 1}, tmp_path / "m.zip")
    with pytest.raises(SystemExit) as done:
        cli.main(["read", str(tmp_path / "m.zip"), "step", "--trust", "bad name"])
    assert done.value.code == 2
    assert re.search(
        r"argument --trust: 'bad name' is not a global name: give pkg\.module\.Class, pkg\.module:Class, "
        r"pkg\.module\.\* or pkg\.",
        capsys.readouterr().err,
    )


def test_signing_with_both_a_key_and_sigstore_says_not_both(tmp_path, capsys):
    zipsave.save({"step": 1}, tmp_path / "m.zip")
    line = _command_error(capsys, "sign", tmp_path / "m.zip", "--private_key", "k.pem", "--sigstore")
    assert "give --private_key KEY.pem or --sigstore, not both" in line


def test_a_hint_no_rule_knows_is_said_to_be_for_python():
    err = zipsave.ParameterMismatchError("does not fit.", hint="Pass `exact_match=False` to load the ones that match.")
    in_command_terms(err)
    assert str(err) == "does not fit. In Python: Pass `exact_match=False` to load the ones that match."
    plain = zipsave.ZipsaveError("broken.", hint="Run `zipsave verify` to check it.")
    in_command_terms(plain)
    assert str(plain) == "broken. Run `zipsave verify` to check it."


def test_signer_options_that_do_not_go_together_are_named_as_flags(tmp_path, capsys):
    # Signer's ValueError ("signing_certificate= needs certificate_chain=") was "unexpected ... (please report
    # this as a zipsave bug)"
    pytest.importorskip("model_signing")
    zipsave.save({"step": 1}, tmp_path / "m.zip")
    line = _command_error(
        capsys, "sign", tmp_path / "m.zip", "--private_key", "k.pem", "--signing_certificate", "c.pem"
    )
    assert line == "zipsave: error: --signing_certificate needs --certificate_chain: the certificates up to the root.\n"
    line = _command_error(capsys, "sign", tmp_path / "m.zip", "--sigstore", "--signing_certificate", "c.pem")
    assert line == "zipsave: error: --signing_certificate needs the --private_key it certifies.\n"


def test_a_required_signature_names_the_signer_options_not_trust(tmp_path, capsys):
    pytest.importorskip("model_signing")
    from tests.signing_pki import write_key_pair

    _, public = write_key_pair(tmp_path, "k")
    zipsave.save({"step": 1}, tmp_path / "m.zip")
    line = _command_error(capsys, "inspect", tmp_path / "m.zip", "--public_key", public)
    assert line.rstrip().endswith(
        "Sign it with `zipsave sign`, or leave out the signer options (--public_key, --certificate_chain, "
        "--identity) for an unsigned archive."
    )
    assert cli.main(["verify", str(tmp_path / "m.zip"), "--public_key", str(public)]) == 1
    out = capsys.readouterr().out
    assert "leave out the signer options" in out and "Trust(" not in out
    line = _command_error(capsys, "verify", tmp_path / "m.zip", "--public_key", tmp_path / "gone.pem")
    assert line.rstrip().endswith("does not exist. Check the path given to --public_key.")
    python = _python_error(lambda: zipsave.inspect(tmp_path / "m.zip", trust=zipsave.Trust(public_keys=[public])))
    assert "or load it with `Trust(..., required=False)` to accept unsigned archives." in python


class _NoCredentials(MemoryFileSystem):
    protocol = "zsnocreds"

    def _refuse(self, *args, **kwargs):
        raise RuntimeError("Unable to locate credentials")

    _open = ls = exists = cat_file = info = makedirs = pipe_file = _refuse


def test_a_checkpoint_directory_whose_filesystem_refuses_names_the_directory(capsys):
    # `zipsave list s3://bucket/run` without credentials was "unexpected NoCredentialsError ... (please report
    # this as a zipsave bug)", and CheckpointManager raised botocore's exception bare
    fsspec.register_implementation("zsnocreds", _NoCredentials, clobber=True)
    message = _python_error(lambda: zipsave.CheckpointManager("zsnocreds://bucket/run"))
    assert message == (
        "checkpoint directory `zsnocreds://bucket/run` could not be reached (RuntimeError: Unable to locate "
        "credentials). Check the URL and the credentials or `storage_options` it needs."
    )
    line = _command_error(capsys, "list", "zsnocreds://bucket/run")
    assert (
        "could not be reached (RuntimeError: Unable to locate credentials). Check the URL and the credentials it "
        in line
    )
