"""``zipsave sign`` and the signer options of ``zipsave verify`` and ``zipsave inspect``: the
command line the ``sign`` extra fixes for scripts and CI."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import zipsave
from tests.signing_pki import write_key_pair, write_pki
from zipsave import cli

pytest.importorskip("model_signing")


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    key, pub = write_key_pair(tmp_path, "ci")
    _, other_pub = write_key_pair(tmp_path, "other")
    archive = tmp_path / "m.zip"
    zipsave.save({"net": torch.nn.Linear(2, 2), "step": 3}, archive)
    return {"key": key, "pub": pub, "other_pub": other_pub, "archive": archive, "dir": tmp_path}


def test_sign_writes_the_detached_signature_model_signing_verifies(setup, capsys):
    archive = setup["archive"]
    assert cli.main(["sign", str(archive), "--private-key", str(setup["key"])]) == 0
    assert capsys.readouterr().out == f"{archive}: signed, signature in {archive}.sig\n"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "model_signing",
            "verify",
            "key",
            str(archive),
            "--signature",
            f"{archive}.sig",
            "--public_key",
            str(setup["pub"]),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert cli.main(["verify", str(archive), "--public-key", str(setup["pub"])]) == 0
    out = capsys.readouterr().out
    assert out == (
        f"{archive}: OK, signed by public key `{setup['pub']}` (sha256:{_hint(setup['pub'])[:16]}...); "
        f"signature {archive}.sig covers the whole file\n"
    )


def _hint(pub: Path) -> str:
    import hashlib

    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_public_key(pub.read_bytes())
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


def test_sign_embed_and_verify_json(setup, capsys):
    archive = setup["archive"]
    assert cli.main(["sign", str(archive), "--private_key", str(setup["key"]), "--embed", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"archive": str(archive), "signature": str(archive), "embedded": True}
    with zipfile.ZipFile(archive) as zf:
        assert zf.namelist()[-1] == "zipsave.sig"
    assert cli.main(["verify", str(archive), "--public_key", str(setup["pub"]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["problems"] == []
    assert report["signature"]["embedded"] is True and report["signature"]["members"] == 6
    assert report["signature"]["location"] == "zipsave.sig" and report["signature"]["kind"] == "key"


def test_verify_exits_1_with_the_reason(setup, capsys):
    archive = setup["archive"]
    assert cli.main(["verify", str(archive), "--public-key", str(setup["pub"])]) == 1
    out = capsys.readouterr().out
    assert f"signature (no-signature): archive `{archive}`" not in out  # the detail, without the archive again
    assert "  - signature (no-signature): is not signed: it has no `zipsave.sig` member nor `" in out
    zipsave.sign(archive, setup["key"])
    assert cli.main(["verify", str(archive), "--public-key", str(setup["other_pub"])]) == 1
    assert "signature (unknown-signer): the signature `" in capsys.readouterr().out
    assert cli.main(["verify", str(archive), "--public-key", str(setup["pub"]), "--signature", str(setup["pub"])]) == 1
    assert "signature (malformed): the signature `" in capsys.readouterr().out


def test_usage_errors_exit_2(setup, capsys):
    archive = str(setup["archive"])
    assert cli.main(["sign", archive]) == 2
    assert capsys.readouterr().err == "zipsave: error: give --private_key KEY.pem, or --sigstore to sign keyless.\n"
    assert cli.main(["sign", archive, "--private-key", str(setup["key"]), "--embed", "--signature", "x.sig"]) == 2
    assert "cannot be combined with --embed" in capsys.readouterr().err
    assert cli.main(["sign", archive, "--private-key", str(setup["pub"])]) == 2
    assert capsys.readouterr().err.startswith(f"zipsave: error: cannot sign with `{setup['pub']}`: ValueError: ")
    assert cli.main(["verify", archive, "--signature", "x.sig"]) == 2
    assert "--signature needs the signer to accept" in capsys.readouterr().err
    assert cli.main(["verify", archive, "--identity", "ci@example.com"]) == 2
    assert "give one --identity_provider for each --identity." in capsys.readouterr().err


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
def test_a_trusted_file_that_cannot_be_read_is_said_first_and_exits_2(setup, capsys, signed):
    # `verify --public-key missing.pub` of an unsigned archive said `no-signature` (of a signed
    # one, `invalid`): the mistyped key is the caller's error, named before the archive is judged
    archive, folder = str(setup["archive"]), setup["dir"]
    if signed:
        zipsave.sign(archive, setup["key"])
    (folder / "notakey.pub").write_text("not a key\n")
    cases = {
        ("--public-key", folder / "missing.pub"): f"the trusted public key `{folder / 'missing.pub'}` does not exist.",
        ("--public-key", folder): f"the trusted public key `{folder}` cannot be read (Is a directory).",
        ("--public-key", folder / "notakey.pub"): f"the trusted public key `{folder / 'notakey.pub'}` holds no PEM",
        ("--certificate-chain", folder / "missing.pem"): f"the trusted certificate `{folder / 'missing.pem'}` does not",
    }
    for (option, path), said in cases.items():
        for command in ("verify", "inspect"):
            assert cli.main([command, archive, option, str(path)]) == 2, (command, option, path)
            out, err = capsys.readouterr()
            assert out == "" and err.startswith("zipsave: error: ") and said in err, err
            assert "no-signature" not in err and "invalid" not in err
    with pytest.raises(zipsave.StorageError, match="missing.pub` does not exist"):
        zipsave.load(archive, trust=zipsave.Trust(public_keys=[folder / "missing.pub"]))


def test_inspect_shows_the_signer(setup, capsys):
    archive = setup["archive"]
    zipsave.sign(archive, setup["key"], embed=True)
    assert cli.main(["inspect", str(archive)]) == 0
    assert "signature: embedded `zipsave.sig`, not checked" in capsys.readouterr().out
    assert cli.main(["inspect", str(archive), "--public-key", str(setup["pub"])]) == 0
    assert f"signature: signed by public key `{setup['pub']}`" in capsys.readouterr().out
    assert cli.main(["inspect", str(archive), "--public-key", str(setup["other_pub"])]) == 2
    assert "which is not among the trusted public keys" in capsys.readouterr().err


def test_certificate_options_as_model_signing_names_them(setup, capsys):
    pki = write_pki(setup["dir"], "fleet")
    archive = setup["archive"]
    assert (
        cli.main(
            [
                "sign",
                str(archive),
                "--private_key",
                str(pki["key"]),
                "--signing_certificate",
                str(pki["cert"]),
                "--certificate_chain",
                str(pki["ca"]),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert cli.main(["verify", str(archive), "--certificate_chain", str(pki["ca"])]) == 0
    assert "OK, signed by certificate `O=zipsave tests,CN=fleet signer`" in capsys.readouterr().out
