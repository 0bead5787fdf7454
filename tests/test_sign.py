"""Signed archives (the ``sign`` extra): signing as zipsave writes, checking before a load
decodes, and both directions with the real ``model_signing`` package (API and CLI)."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import zipsave
from tests.signing_pki import write_key_pair, write_pki

pytest.importorskip("model_signing")
from model_signing import signing as ms_signing  # noqa: E402
from model_signing import verifying as ms_verifying


def model_signing_cli(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "model_signing", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    ci_key, ci_pub = write_key_pair(folder, "ci")
    other_key, other_pub = write_key_pair(folder, "other")
    return {"key": ci_key, "pub": ci_pub, "other_key": other_key, "other_pub": other_pub}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_pki(tmp_path_factory.mktemp("pki"), "fleet")


def state() -> dict:
    torch.manual_seed(0)
    return {"net": torch.nn.Linear(4, 3), "step": 7}


def test_detached_signature_is_what_model_signing_writes_and_accepts(tmp_path, keys):
    path = tmp_path / "m.zip"
    zipsave.save(state(), path)
    written = zipsave.sign(path, keys["key"])
    assert written == f"{path}.sig"
    bundle = json.loads(Path(written).read_text())
    # model_signing's own signature of the same file, for comparison
    ms_signing.Config().use_elliptic_key_signer(private_key=keys["key"]).sign(path, tmp_path / "theirs.sig")
    theirs = json.loads((tmp_path / "theirs.sig").read_text())
    assert bundle["mediaType"] == theirs["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    assert bundle["verificationMaterial"] == theirs["verificationMaterial"]
    ours_statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    their_statement = json.loads(base64.b64decode(theirs["dsseEnvelope"]["payload"]))
    assert ours_statement["predicateType"] == "https://model_signing/signature/v1.0"
    assert ours_statement["subject"] == their_statement["subject"]
    assert ours_statement["predicate"]["resources"] == their_statement["predicate"]["resources"]
    assert [r["name"] for r in ours_statement["predicate"]["resources"]] == ["."]
    done = model_signing_cli("verify", "key", path, "--signature", written, "--public_key", keys["pub"])
    assert done.returncode == 0, done.stderr
    ms_verifying.Config().use_elliptic_key_verifier(public_key=keys["pub"]).verify(path, written)
    info = zipsave.verify_signature(path, zipsave.Trust(public_keys=[keys["pub"]]))
    assert info is not None and info.kind == "key" and not info.embedded and str(keys["pub"]) in info.signer


def test_model_signing_key_signature_is_accepted(tmp_path, keys):
    path = tmp_path / "m.zip"
    zipsave.save(state(), path)
    done = model_signing_cli("sign", "key", path, "--private_key", keys["key"], "--signature", f"{path}.sig")
    assert done.returncode == 0, done.stderr
    trust = zipsave.Trust(public_keys=[keys["other_pub"], keys["pub"]])
    restored = {"net": torch.nn.Linear(4, 3), "step": 0}
    report = zipsave.LoadReport()
    zipsave.restore(restored, path, trust=trust, report=report)
    assert report.signature.kind == "key" and str(keys["pub"]) in report.signature.signer
    assert torch.equal(restored["net"].weight, state()["net"].weight) and restored["step"] == 7
    assert zipsave.load_archive(path, trust=trust)[0]["step"] == 7


def test_model_signing_certificate_signature_is_accepted(tmp_path, pki):
    path = tmp_path / "m.zip"
    zipsave.save(state(), path)
    done = model_signing_cli(
        "sign",
        "certificate",
        path,
        "--private_key",
        pki["key"],
        "--signing_certificate",
        pki["cert"],
        "--certificate_chain",
        pki["ca"],
        "--signature",
        f"{path}.sig",
    )
    assert done.returncode == 0, done.stderr
    info = zipsave.verify_signature(path, zipsave.Trust(certificates=[pki["ca"]]))
    assert info is not None and info.kind == "certificate" and "CN=fleet signer" in info.signer
    assert zipsave.load_archive(path, trust=zipsave.Trust(certificates=[pki["ca"]]))[0]["step"] == 7


def test_zipsave_certificate_signature_is_accepted_by_model_signing(tmp_path, pki):
    path = tmp_path / "m.zip"
    zipsave.save(state(), path)
    signer = zipsave.Signer(private_key=pki["key"], signing_certificate=pki["cert"], certificate_chain=[pki["ca"]])
    zipsave.sign(path, signer, embed=False)
    done = model_signing_cli(
        "verify", "certificate", path, "--signature", f"{path}.sig", "--certificate_chain", pki["ca"]
    )
    assert done.returncode == 0, done.stderr
    assert zipsave.verify_signature(path, zipsave.Trust(certificates=[pki["ca"]])).kind == "certificate"


def test_embedded_signature_covers_every_member_and_model_signing_accepts_it_extracted(tmp_path, keys):
    path = tmp_path / "m.zip"
    zipsave.save(state(), path, sign=keys["key"])
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path / "extracted")
    assert names[-1] == "zipsave.sig" and "manifest.json" in names
    info = zipsave.verify_signature(path, zipsave.Trust(public_keys=[keys["pub"]]))
    assert info.embedded and info.members == len(names) - 1 and info.location == "zipsave.sig"
    folder = tmp_path / "extracted"
    done = model_signing_cli(
        "verify", "key", folder, "--signature", folder / "zipsave.sig", "--public_key", keys["pub"]
    )
    assert done.returncode == 0, done.stderr
    (folder / "data").write_bytes(b"{}")
    done = model_signing_cli(
        "verify", "key", folder, "--signature", folder / "zipsave.sig", "--public_key", keys["pub"]
    )
    assert done.returncode != 0 and "data" in done.stderr


def test_sign_embed_rewrites_an_archive_and_resigning_replaces_the_signature(tmp_path, keys):
    path = tmp_path / "m.zip"
    zipsave.save(state(), path)
    assert zipsave.sign(path, keys["key"], embed=True) == str(path)
    zipsave.sign(path, keys["other_key"], embed=True)
    with zipfile.ZipFile(path) as zf:
        assert zf.namelist().count("zipsave.sig") == 1
    assert "other.pub" in zipsave.verify_signature(path, zipsave.Trust(public_keys=[keys["other_pub"]])).signer
    with pytest.raises(zipsave.SignatureError) as err:
        zipsave.verify_signature(path, zipsave.Trust(public_keys=[keys["pub"]]))
    assert err.value.reason == "unknown-signer"
    assert zipsave.inspect(path, verify=True).verified and zipsave.load_archive(path)[0]["step"] == 7


def test_an_unknown_signer_is_named_by_a_short_key_digest(tmp_path, keys):
    """It was cut twice: `sha256:c986b27fe8d95......`."""
    path = tmp_path / "m.zip"
    zipsave.save(state(), path, sign=keys["key"])
    with pytest.raises(zipsave.SignatureError) as err:
        zipsave.verify_signature(path, zipsave.Trust(public_keys=[keys["other_pub"]]))
    assert re.search(r"it is signed by the key sha256:[0-9a-f]{16}\.\.\., which is not among", str(err.value))
    assert "...." not in str(err.value)


def test_signed_archive_reads_everywhere_without_the_signature_mistaken_for_data(tmp_path, keys):
    path = tmp_path / "m.zip"
    zipsave.save(state(), path, sign=keys["key"])
    info = zipsave.inspect(path)  # no warning (warnings are errors here): not an unknown member
    assert info.signature.startswith("embedded `zipsave.sig`, not checked")
    assert "signature: embedded `zipsave.sig`" in str(info) and "zipsave.sig" in info._repr_html_()
    checked = zipsave.inspect(path, trust=zipsave.Trust(public_keys=[keys["pub"]]))
    assert checked.signature.startswith(f"signed by public key `{keys['pub']}`")
    assert f"signature: signed by public key `{keys['pub']}`" in str(checked)
    assert f"signature: signed by public key `{keys['pub']}`".replace("`", "") in checked._repr_html_().replace("`", "")
    assert zipsave.inspect(path, verify=True).verified is True
    assert zipsave.load_archive(path)[0]["step"] == 7
    assert zipsave.read(path, "net/weight", trust=zipsave.Trust(public_keys=[keys["pub"]])).shape == (3, 4)
    from zipsave._tools import verify

    assert verify(path, require_manifest=True) == []
    from stable_baselines3.common.save_util import load_from_zip_file

    data, params, variables = load_from_zip_file(path)
    assert data["step"] == 7 and set(params) == {"net"}


def test_trust_not_required_loads_unsigned_but_still_checks_a_present_signature(tmp_path, keys):
    unsigned, signed = tmp_path / "u.zip", tmp_path / "s.zip"
    zipsave.save(state(), unsigned)
    zipsave.save(state(), signed, sign=keys["other_key"])
    lenient = zipsave.Trust(public_keys=[keys["pub"]], required=False)
    assert zipsave.load_archive(unsigned, trust=lenient)[0]["step"] == 7
    assert zipsave.verify_signature(unsigned, lenient) is None
    with pytest.raises(zipsave.SignatureError, match=re.escape("is not among the trusted public keys")):
        zipsave.load_archive(signed, trust=lenient)


def test_save_with_detached_signer_and_file_objects(tmp_path, keys):
    path = tmp_path / "d.zip"
    zipsave.save(state(), path, sign=zipsave.Signer(private_key=keys["key"], embed=False))
    assert Path(f"{path}.sig").is_file()
    with zipfile.ZipFile(path) as zf:
        assert "zipsave.sig" not in zf.namelist()
    trust = zipsave.Trust(public_keys=[keys["pub"]])
    assert zipsave.load_archive(path, trust=trust)[0]["step"] == 7
    with open(path, "rb") as f:  # a file object has no ARCHIVE.sig beside it: only an embedded one counts
        with pytest.raises(zipsave.SignatureError, match=re.escape("is not signed: it has no `zipsave.sig` member")):
            zipsave.load_archive(f, trust=trust)
    with open(path, "rb") as f:
        assert zipsave.load_archive(f, trust=zipsave.Trust(public_keys=[keys["pub"]], signature=f"{path}.sig"))[0]
    buffer = io.BytesIO()
    with pytest.raises(ValueError, match=re.escape("use Signer(embed=True)")):
        zipsave.save(state(), buffer, sign=zipsave.Signer(private_key=keys["key"], embed=False))
    assert buffer.getvalue() == b""  # refused before a byte was written
    zipsave.save(state(), buffer, sign=keys["key"])
    buffer.seek(0)
    assert zipsave.verify_signature(buffer, trust).embedded


def test_background_save_and_checkpoint_manager_sign_every_checkpoint(tmp_path, keys):
    trust = zipsave.Trust(public_keys=[keys["pub"]])
    zipsave.save(state(), tmp_path / "bg.zip", sign=keys["key"], background=True).wait()
    assert zipsave.verify_signature(tmp_path / "bg.zip", trust).embedded
    manager = zipsave.CheckpointManager(tmp_path / "ck", sign=keys["key"], trust=trust, keep_last=2)
    for step in (1, 2, 3):
        manager.save(step, state(), force=True)
    manager.wait()
    for checkpoint in manager.list():
        assert zipsave.verify_signature(checkpoint.path, trust).embedded
    target = {"net": torch.nn.Linear(4, 3), "step": 0}
    assert manager.restore_latest(target).step == 3 and target["step"] == 7
    manager.close()
    view = zipsave.CheckpointManager(
        tmp_path / "ck", read_only=True, trust=zipsave.Trust(public_keys=[keys["other_pub"]])
    )
    with pytest.raises(zipsave.SignatureError) as err:
        view.load_latest()
    assert err.value.reason == "unknown-signer"
    assert [c.step for c in view.list()] == [2, 3]  # refused, never set aside as damaged
    with pytest.raises(ValueError, match=re.escape("use Signer(embed=True)")):
        zipsave.CheckpointManager(tmp_path / "ck2", sign=zipsave.Signer(private_key=keys["key"], embed=False))


def test_sb3_callback_and_install_take_the_settings(tmp_path, keys):
    import zipsave.sb3

    trust = zipsave.Trust(public_keys=[keys["pub"]])
    callback = zipsave.sb3.CheckpointCallback(tmp_path / "runs", every_steps=10, sign=keys["key"], trust=trust)
    assert callback.manager.sign.private_key == str(keys["key"]) and callback.manager.trust is trust
    callback.manager.close()
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, device="cpu")
    model.save(tmp_path / "unsigned.zip")
    zipsave.save(model, tmp_path / "signed.zip", sign=keys["key"])
    with zipsave.sb3.installed(trust=trust):
        assert PPO.load(tmp_path / "signed.zip", device="cpu").n_steps == 64
        with pytest.raises(zipsave.SignatureError, match=re.escape("is not signed")):
            PPO.load(tmp_path / "unsigned.zip", device="cpu")
    with pytest.raises(TypeError, match=re.escape("`trust` must be a zipsave.Trust or None, got str.")):
        zipsave.sb3.install(trust="ci.pub")
    assert not zipsave.sb3.is_installed()
    # an archive SB3 itself wrote (deflated, no manifest), signed afterwards: SB3 still reads it
    shutil.copy(tmp_path / "unsigned.zip", tmp_path / "sb3-signed.zip")
    zipsave.sign(tmp_path / "sb3-signed.zip", keys["key"], embed=True)
    assert PPO.load(tmp_path / "sb3-signed.zip", device="cpu").n_steps == 64
    assert zipsave.load_archive(tmp_path / "sb3-signed.zip", trust=trust)[0]["n_steps"] == 64


def test_settings_are_checked_when_made(keys):
    with pytest.raises(ValueError, match=re.escape("Trust accepts no signer")):
        zipsave.Trust()
    with pytest.raises(TypeError, match=re.escape("identities must hold (identity, identity_provider) pairs")):
        zipsave.Trust(identities=["ci@example.com"])
    with pytest.raises(TypeError, match=re.escape("public_keys must hold paths")):
        zipsave.Trust(public_keys=[b"-----BEGIN PUBLIC KEY-----"])
    with pytest.raises(ValueError, match=re.escape("Signer needs a private_key= or sigstore=True")):
        zipsave.Signer()
    with pytest.raises(ValueError, match=re.escape("signing_certificate= needs certificate_chain=")):
        zipsave.Signer(private_key="k.pem", signing_certificate="c.crt")
    assert [
        zipsave.Signer(private_key="k.pem").kind,
        zipsave.Signer(sigstore=True).kind,
        zipsave.Signer(private_key="k.pem", signing_certificate="c.crt", certificate_chain="ca.crt").kind,
    ] == ["key", "sigstore", "certificate"]
    with pytest.raises(TypeError, match=re.escape("trust must be a zipsave.Trust or None, found str.")):
        zipsave.load_archive("missing.zip", trust="ci.pub")
    with pytest.raises(TypeError, match=re.escape("sign= takes a zipsave.Signer or the path of a private key")):
        zipsave.save({}, "never.zip", sign=42)
    trust = zipsave.Trust(public_keys=keys["pub"], identities=[("ci@example.com", "https://issuer.example")])
    assert trust.public_keys == (str(keys["pub"]),) and trust.required is True
    assert trust.identities == (("ci@example.com", "https://issuer.example"),)


def test_a_default_load_never_imports_model_signing(tmp_path, keys):
    path = tmp_path / "m.zip"
    zipsave.save(state(), path, sign=keys["key"])
    code = (
        "import sys, zipsave\n"
        f"zipsave.load_archive({str(path)!r}); zipsave.inspect({str(path)!r})\n"
        "zipsave.save({'x': 1}, " + repr(str(tmp_path / "n.zip")) + ")\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('model_signing', 'sigstore', 'sigstore_models', 'OpenSSL'))\n"
        "print(bad)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_sb3_replay_buffer_door_checks_the_signature(tmp_path, keys):
    from stable_baselines3 import DQN

    import zipsave.sb3

    model = DQN("MlpPolicy", "CartPole-v1", buffer_size=200, learning_starts=10, device="cpu")
    model.learn(30)
    zipsave.save(model, tmp_path / "dqn.zip", include=["replay_buffer"], sign=keys["key"])
    rewrite = tmp_path / "dqn-other.zip"
    zipsave.save(model, rewrite, include=["replay_buffer"], sign=keys["other_key"])
    with zipsave.sb3.installed(trust=zipsave.Trust(public_keys=[keys["pub"]])):
        fresh = DQN("MlpPolicy", "CartPole-v1", buffer_size=200, device="cpu")
        fresh.load_replay_buffer(tmp_path / "dqn.zip")
        assert fresh.replay_buffer.size() == model.replay_buffer.size()
        with pytest.raises(zipsave.SignatureError, match=re.escape("is not among the trusted public keys")):
            fresh.load_replay_buffer(rewrite)


def test_a_key_encrypted_with_a_password_signs(tmp_path):
    # model_signing's loader takes the password as bytes: the str that Signer(password=) and
    # `zipsave sign --password` give failed every encrypted key ("Cannot convert <class 'str'>")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    encrypted = serialization.BestAvailableEncryption(b"s3cret")
    (tmp_path / "k.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encrypted)
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "k.pub").write_bytes(public)
    zipsave.save(state(), tmp_path / "m.zip")
    zipsave.sign(tmp_path / "m.zip", private_key=tmp_path / "k.pem", password="s3cret")
    info = zipsave.verify_signature(tmp_path / "m.zip", zipsave.Trust(public_keys=[tmp_path / "k.pub"]))
    assert info is not None and info.kind == "key"
    with pytest.raises(zipsave.ZipsaveError, match=re.escape("Incorrect password")):
        zipsave.sign(tmp_path / "m.zip", private_key=tmp_path / "k.pem", password="wrong")
