"""Every way to tamper with a signed archive is refused at every door, before anything of it is
decoded, and leaves the caller with no model: changed, added, removed and renamed members, a
signature from another archive, the wrong key, an expired certificate, and hostile bundles."""

from __future__ import annotations

import base64
import json
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import zipsave
from tests.signing_pki import write_key_pair, write_pki
from zipsave import cli

pytest.importorskip("model_signing")

MEMBERS = ["data", "pytorch_variables.pth", "net.pth", "_zipsave_version", "system_info.txt", "manifest.json"]


def state(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    return {"net": torch.nn.Linear(4, 3), "step": 7 + seed}


def rewrite(src: Path, dst: Path, edit: Callable[[list[tuple[str, bytes]]], list[tuple[str, bytes]]]) -> Path:
    """Copy the archive ``src`` to ``dst`` member by member through ``edit`` (as a zip tool would)."""
    with zipfile.ZipFile(src) as zf:
        members = [(n, zf.read(n)) for n in zf.namelist()]
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zf:
        for name, data in edit(members):
            zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    return dst


def flip(member: str) -> Callable:
    def edit(members: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        out = []
        for name, data in members:
            if name == member:
                at = len(data) // 2
                data = data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]
            out.append((name, data))
        return out

    return edit


def replace_signature(raw: bytes) -> Callable:
    return lambda members: [(n, raw if n == "zipsave.sig" else d) for n, d in members]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tamper")
    key, pub = write_key_pair(d, "ci")
    attacker_key, attacker_pub = write_key_pair(d, "attacker")
    expired = write_pki(d, "old", expired=True)
    other_ca = write_pki(d, "rogue")
    signed, other = d / "signed.zip", d / "other.zip"
    zipsave.save(state(0), signed, sign=key)
    zipsave.save(state(1), other, sign=key)
    detached = d / "detached.zip"
    zipsave.save(state(0), detached)
    zipsave.sign(detached, key)
    zipsave.save(state(1), d / "detached-other.zip")
    zipsave.sign(d / "detached-other.zip", key)
    return {
        "dir": d,
        "key": key,
        "pub": pub,
        "attacker_key": attacker_key,
        "attacker_pub": attacker_pub,
        "expired": expired,
        "rogue": other_ca,
        "signed": signed,
        "other": other,
        "detached": detached,
    }


def _case(world: dict[str, Path], case: str) -> tuple[Path, zipsave.Trust, tuple[str, ...]]:
    """The tampered archive of ``case``, the trust setting it is loaded with, and the reasons
    the refusal may give."""
    d, signed, out = world["dir"], world["signed"], world["dir"] / f"{case.replace('/', '_')}.zip"
    trust = zipsave.Trust(public_keys=[world["pub"]])
    with zipfile.ZipFile(signed) as zf:
        sig = zf.read("zipsave.sig")
    bundle = json.loads(sig)
    mismatch = ("digest-mismatch",)
    if case.startswith("flip:"):
        member = case[5:]
        return (
            rewrite(signed, out, flip(member)),
            trust,
            ("malformed", "invalid") if member == "zipsave.sig" else mismatch,
        )
    if case == "added":
        return rewrite(signed, out, lambda m: [*m[:-1], ("extra.pth", b"x"), m[-1]]), trust, mismatch
    if case == "removed":
        return rewrite(signed, out, lambda m: [x for x in m if x[0] != "net.pth"]), trust, mismatch
    if case == "renamed":
        return rewrite(signed, out, lambda m: [("net2.pth" if n == "net.pth" else n, b) for n, b in m]), trust, mismatch
    if case == "copied-embedded":
        with zipfile.ZipFile(world["other"]) as zf:
            other_sig = zf.read("zipsave.sig")
        return rewrite(signed, out, replace_signature(other_sig)), trust, ("digest-mismatch", "other-file")
    if case == "copied-detached":
        shutil.copy(world["detached"], out)
        shutil.copy(f"{d / 'detached-other.zip'}.sig", f"{out}.sig")
        return out, trust, ("other-file",)
    if case == "detached-changed":
        rewrite(world["detached"], out, flip("data"))
        shutil.copy(f"{world['detached']}.sig", f"{out}.sig")
        return out, trust, ("digest-mismatch", "other-file")
    if case == "swapped-key":
        return signed, zipsave.Trust(public_keys=[world["attacker_pub"]]), ("unknown-signer",)
    if case == "resigned-by-attacker":
        rewrite(signed, out, flip("data"))
        zipsave.sign(out, world["attacker_key"], embed=True)
        return out, trust, ("unknown-signer",)
    if case == "forged-key-hint":
        rewrite(signed, out, flip("data"))
        zipsave.sign(out, world["attacker_key"], embed=True)
        with zipfile.ZipFile(out) as zf:
            forged = json.loads(zf.read("zipsave.sig"))
        forged["verificationMaterial"] = bundle["verificationMaterial"]
        return rewrite(out, d / "forged2.zip", replace_signature(json.dumps(forged).encode())), trust, ("invalid",)
    if case in ("expired-certificate", "rogue-certificate"):
        pki = world["expired"] if case == "expired-certificate" else world["rogue"]
        shutil.copy(world["detached"], out)
        zipsave.sign(
            out, zipsave.Signer(private_key=pki["key"], signing_certificate=pki["cert"], certificate_chain=[pki["ca"]])
        )
        anchor = world["expired"]["ca"]  # the rogue leaf chains to its own CA, not this one
        return out, zipsave.Trust(certificates=[anchor]), ("unknown-signer",)
    if case == "unsigned":
        shutil.copy(world["detached"], out)
        return out, trust, ("no-signature",)
    if case == "truncated-bundle":
        return rewrite(signed, out, replace_signature(sig[: len(sig) // 2])), trust, ("malformed",)
    if case == "huge-bundle":
        return rewrite(signed, out, replace_signature(b" " * (17 << 20))), trust, ("malformed",)
    if case == "deep-bundle":
        return rewrite(signed, out, replace_signature(b"[" * 200_000 + b"]" * 200_000)), trust, ("malformed",)
    if case == "not-json":
        return rewrite(signed, out, replace_signature(b"\xff\xfe\x00PK\x03\x04 not json")), trust, ("malformed",)
    if case == "wrong-shape":
        shaped = {**bundle, "verificationMaterial": [], "dsseEnvelope": "x"}
        return rewrite(signed, out, replace_signature(json.dumps(shaped).encode())), trust, ("malformed",)
    if case == "deep-payload":
        deep = {
            **bundle,
            "dsseEnvelope": {**bundle["dsseEnvelope"], "payload": base64.b64encode(b"[" * 5000 + b"]" * 5000).decode()},
        }
        return rewrite(signed, out, replace_signature(json.dumps(deep).encode())), trust, ("malformed",)
    if case == "many-signatures":
        many = {
            **bundle,
            "dsseEnvelope": {**bundle["dsseEnvelope"], "signatures": bundle["dsseEnvelope"]["signatures"] * 1000},
        }
        return rewrite(signed, out, replace_signature(json.dumps(many).encode())), trust, ("malformed",)
    if case == "garbage-signature":
        bad = json.loads(sig)
        bad["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(b"\x30\x02\x00\x00").decode()
        return rewrite(signed, out, replace_signature(json.dumps(bad).encode())), trust, ("invalid",)
    raise AssertionError(case)


CASES = [f"flip:{m}" for m in [*MEMBERS, "zipsave.sig"]] + [
    "added",
    "removed",
    "renamed",
    "copied-embedded",
    "copied-detached",
    "detached-changed",
    "swapped-key",
    "resigned-by-attacker",
    "forged-key-hint",
    "expired-certificate",
    "rogue-certificate",
    "unsigned",
    "truncated-bundle",
    "huge-bundle",
    "deep-bundle",
    "not-json",
    "wrong-shape",
    "deep-payload",
    "many-signatures",
    "garbage-signature",
]


def _door_restore(path: Path, trust: zipsave.Trust) -> None:
    target = {"net": torch.nn.Linear(4, 3), "step": 0}
    before = target["net"].weight.detach().clone()
    try:
        zipsave.restore(target, path, trust=trust)
    finally:  # nothing of the archive reached the object
        assert target["step"] == 0 and torch.equal(target["net"].weight, before)


DOORS: dict[str, Callable[[Path, zipsave.Trust], object]] = {
    "load": lambda p, t: zipsave.load(p, trust=t),
    "load_archive": lambda p, t: zipsave.load_archive(p, trust=t),
    "restore": _door_restore,
    "read": lambda p, t: zipsave.read(p, "net/weight", trust=t),
    "inspect": lambda p, t: zipsave.inspect(p, trust=t),
    "verify_signature": lambda p, t: zipsave.verify_signature(p, t),
}


@pytest.mark.parametrize("door", sorted(DOORS))
@pytest.mark.parametrize("case", CASES)
def test_tampering_is_refused_at_every_door(world, case, door):
    path, trust, reasons = _case(world, case)
    with pytest.raises(zipsave.SignatureError) as err:
        DOORS[door](path, trust)
    assert err.value.reason in reasons, str(err.value)
    assert err.value.archive and str(path.name) in err.value.archive


@pytest.mark.parametrize("case", CASES)
def test_tampering_fails_zipsave_verify(world, case, capsys):
    path, trust, reasons = _case(world, case)
    args = ["verify", str(path)]
    args += [f"--public-key={k}" for k in trust.public_keys] + [f"--certificate-chain={c}" for c in trust.certificates]
    assert cli.main(args) == 1
    out = capsys.readouterr().out
    assert any(f"signature ({reason})" in out for reason in reasons), out


def test_refusals_say_what_failed(world):
    path, trust, _ = _case(world, "flip:net.pth")
    with pytest.raises(
        zipsave.SignatureError,
        match=re.escape(
            "the signature `zipsave.sig` does not match: members whose bytes differ from what was signed: `net.pth`."
        ),
    ):
        zipsave.load(path, trust=trust)
    path, trust, _ = _case(world, "swapped-key")
    with pytest.raises(zipsave.SignatureError, match=re.escape("which is not among the trusted public keys (`")):
        zipsave.load(path, trust=trust)
    path, trust, _ = _case(world, "copied-detached")
    with pytest.raises(zipsave.SignatureError, match=re.escape("covers `detached-other.zip` with SHA-256")):
        zipsave.load(path, trust=trust)
    path, trust, _ = _case(world, "expired-certificate")
    with pytest.raises(zipsave.SignatureError, match=re.escape("O=zipsave tests,CN=old signer` is valid from")):
        zipsave.load(path, trust=trust)
    path, trust, _ = _case(world, "unsigned")
    with pytest.raises(zipsave.SignatureError, match=re.escape("is not signed: it has no `zipsave.sig` member nor `")):
        zipsave.load(path, trust=trust)
    path, trust, _ = _case(world, "huge-bundle")
    with pytest.raises(zipsave.SignatureError, match=re.escape("more than the 16777216 a signature may be")):
        zipsave.load(path, trust=trust)


def test_a_truncated_archive_is_refused(world, tmp_path):
    raw = world["signed"].read_bytes()
    for cut in (len(raw) // 3, len(raw) - 30):
        bad = tmp_path / f"cut{cut}.zip"
        bad.write_bytes(raw[:cut])
        with pytest.raises(zipsave.ZipsaveError):
            zipsave.load(bad, trust=zipsave.Trust(public_keys=[world["pub"]]))


def test_sigstore_bundles_offline(world, tmp_path):
    """Keyless (Sigstore) signatures: routing and refusals that need no network. Checking a real
    keyless signature needs Sigstore's trust root (the network, or trust_config=)."""
    with zipfile.ZipFile(world["signed"]) as zf:
        bundle = json.loads(zf.read("zipsave.sig"))
    bundle["verificationMaterial"] = {
        "certificate": {"rawBytes": base64.b64encode(b"not a certificate").decode()},
        "tlogEntries": [],
    }
    path = rewrite(world["signed"], tmp_path / "keyless.zip", replace_signature(json.dumps(bundle).encode()))
    with pytest.raises(
        zipsave.SignatureError,
        match=re.escape("it is a Sigstore keyless signature, and the trust setting names no identities"),
    ):
        zipsave.load(path, trust=zipsave.Trust(public_keys=[world["pub"]]))
    keyless = zipsave.Trust(identities=[("ci@example.com", "https://accounts.example.com")])
    with pytest.raises(zipsave.SignatureError) as err:
        zipsave.load(path, trust=keyless)
    assert err.value.reason == "invalid" and "the Sigstore bundle cannot be read" in str(err.value)
    # a key signature under a trust setting of identities only: unknown signer, no network needed
    with pytest.raises(
        zipsave.SignatureError, match=re.escape("signed with a key, and the trust setting names no public_keys")
    ):
        zipsave.load(world["signed"], trust=keyless)


@pytest.fixture(scope="module")
def plain_bundle(world) -> dict:
    with zipfile.ZipFile(world["signed"]) as zf:
        return json.loads(zf.read("zipsave.sig"))


def _json_values():
    from hypothesis import strategies as st

    leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
        max_leaves=20,
    )


def test_any_bytes_as_a_signature_are_refused_with_a_signature_error(world):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from zipsave._sign._bundle import parse_bundle

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.binary(max_size=2000))
    def check(raw: bytes) -> None:
        with pytest.raises(zipsave.SignatureError) as err:
            parse_bundle(raw, archive="a.zip", where="zipsave.sig")
        assert err.value.reason == "malformed"

    check()


def test_any_misshapen_bundle_is_refused_without_a_stray_exception(world, plain_bundle, tmp_path_factory):
    """Random values in every field of a real bundle: a SignatureError, never another exception
    from model_signing or its protobuf models."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    trust = zipsave.Trust(public_keys=[world["pub"]])
    paths = [
        ("mediaType",),
        ("verificationMaterial",),
        ("verificationMaterial", "publicKey"),
        ("verificationMaterial", "publicKey", "hint"),
        ("dsseEnvelope",),
        ("dsseEnvelope", "payload"),
        ("dsseEnvelope", "payloadType"),
        ("dsseEnvelope", "signatures"),
    ]
    folder = tmp_path_factory.mktemp("fuzz")

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.sampled_from(paths), _json_values())
    def check(path: tuple[str, ...], value: object) -> None:
        bundle = json.loads(json.dumps(plain_bundle))
        node = bundle
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
        out = rewrite(world["signed"], folder / "fuzz.zip", replace_signature(json.dumps(bundle).encode()))
        try:
            info = zipsave.verify_signature(out, trust)
        except zipsave.SignatureError:
            return
        # only what the signature does not cover may change and pass: the key's hint, which
        # merely says which key to try (an older bundle has none)
        unsigned = path in {("verificationMaterial", "publicKey"), ("verificationMaterial", "publicKey", "hint")}
        assert unsigned or node[path[-1]] == plain_bundle_value(plain_bundle, path)
        assert str(world["pub"]) in info.signer

    check()


def plain_bundle_value(bundle: dict, path: tuple[str, ...]) -> object:
    node: object = bundle
    for part in path:
        node = node[part]  # type: ignore[index]
    return node


def test_names_from_a_signature_are_escaped_in_messages(world, tmp_path):
    evil = tmp_path / "evil\x1b[2J.zip"
    shutil.copy(world["detached"], evil)
    with open(evil, "ab") as f:
        f.write(b"\0")  # another file's bytes
    zipsave.sign(evil, world["key"])
    target = tmp_path / "m.zip"
    shutil.copy(world["detached"], target)
    shutil.copy(f"{evil}.sig", f"{target}.sig")
    with pytest.raises(zipsave.SignatureError) as err:
        zipsave.load(target, trust=zipsave.Trust(public_keys=[world["pub"]]))
    assert err.value.reason == "other-file"
    assert "covers `evil\\x1b[2J.zip` with SHA-256" in str(err.value) and "\x1b" not in str(err.value)
