"""Signed evidence through the CLI against `infercrane local serve` (moto's KMS holds the stack's
key): what `replay --save` / `--export-aiperf` write verifies offline with the PEM that `admin
signing-key` prints; a forged document, another stack's key, or a changed export fails with 5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from infercrane.domain.digest import compute_digest

pytestmark = pytest.mark.slow

START = "2026-11-02T00:00:00Z"
UNTIL = "2026-11-02T01:00:00Z"


@pytest.fixture(scope="module")
def deployment(served, shared_data, tmp_path_factory):
    rows = (shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_text().splitlines()[:200]
    path = tmp_path_factory.mktemp("signed") / "mooncake200.jsonl"
    path.write_text("\n".join(rows) + "\n")
    done = served.cli("capture", "import", str(path), "--deployment", "e2e-signed", "--format",
                      "mooncake-jsonl", "--start", START, "--output", "json", timeout=600)
    assert done.returncode == 0, done.stderr
    return "e2e-signed"


@pytest.fixture(scope="module")
def public_key(served, tmp_path_factory) -> Path:
    done = served.cli("admin", "signing-key", tenant=None)  # public: no key needed
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("-----BEGIN PUBLIC KEY-----")
    pem = tmp_path_factory.mktemp("key") / "signing-key.pem"
    pem.write_text(done.stdout)
    return pem


@pytest.fixture(scope="module")
def saved(served, deployment, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    done = served.cli("replay", deployment, "--window", "1h", "--until", UNTIL, "--save",
                      str(path), "--export-aiperf", str(path.with_suffix(".jsonl")))
    assert done.returncode == 0, done.stderr
    return path


def verify(served, *args: str):
    done = served.cli("trace", "verify", *args, "--output", "json", tenant=None)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def failing(result) -> list[str]:
    return [r["check"] for r in result["rows"] if not r["ok"]]


def test_an_untouched_document_passes_offline_with_the_printed_key(served, saved, public_key):
    code, result, err = verify(served, str(saved), "--public-key", str(public_key),
                               "--endpoint", "http://127.0.0.1:9")  # nothing answers there
    assert code == 0, err
    assert [r["check"] for r in result["rows"]] == [
        "signature", "digest", "blocks", "schema", "statistics", "evidence class"]
    assert all(r["ok"] for r in result["rows"])


def test_a_forged_document_with_a_recomputed_digest_fails_naming_the_digest_row(
        served, saved, public_key, tmp_path):
    document = json.loads(saved.read_text())
    document["records"][3]["input_tokens"] += 1000
    document["digest"] = compute_digest(document)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(document))
    code, result, err = verify(served, str(forged), "--public-key", str(public_key),
                               "--attestation", f"{saved}.intoto.jsonl")
    assert code == 5
    assert "digest" in failing(result)
    assert "Verification failed" in err


@pytest.mark.parametrize("block", ["build", "records", "window", "digest"])
def test_a_served_document_changed_in_any_block_fails_naming_the_block(
        served, saved, public_key, tmp_path, block):
    # `build` is outside the digest, yet signed: rewriting who built it and when fails too.
    document = json.loads(saved.read_text())
    if block == "build":
        document["build"]["software"] = "infercrane 0.0-forged"
    elif block == "records":
        document["records"][0]["output_tokens"] += 1
    elif block == "window":
        document["window"]["duration_ms"] += 1
    else:
        document["digest"] = "sha256:" + "0" * 64
    if block != "digest":
        document["digest"] = compute_digest(document)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(document))
    code, result, err = verify(served, str(forged), "--public-key", str(public_key),
                               "--attestation", f"{saved}.intoto.jsonl")
    assert code == 5, err
    blocks = next(r for r in result["rows"] if r["check"] == "blocks")
    assert not blocks["ok"] and block in blocks["detail"]


def test_a_key_of_another_stack_fails_the_signature_row(served, saved, tmp_path):
    other = tmp_path / "other.pem"
    other.write_text(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode())
    code, result, _ = verify(served, str(saved), "--public-key", str(other))
    assert code == 5
    assert failing(result)[0] == "signature"


def test_a_stored_trace_verifies_by_digest_against_the_service(served, saved):
    digest = json.loads(saved.read_text())["digest"]
    done = served.cli("trace", "verify", digest, "--output", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verified"] is True


def test_the_aiperf_export_verifies_and_a_changed_export_fails(served, saved, public_key):
    exported = saved.with_suffix(".jsonl")
    assert Path(f"{exported}.intoto.jsonl").is_file()
    code, result, err = verify(served, str(exported), "--public-key", str(public_key))
    assert code == 0, err
    assert [r["check"] for r in result["rows"]] == ["signature", "digest"]
    lines = exported.read_text().splitlines()
    row = json.loads(lines[0])
    row["output_length"] += 1
    exported.write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    code, result, _ = verify(served, str(exported), "--public-key", str(public_key))
    assert (code, failing(result)) == (5, ["digest"])
