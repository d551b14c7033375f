"""`infercrane trace verify` offline (`--public-key`), as a user runs it: one row per check,
exit 5 when any fails. Documents are signed with a throwaway key; "another stack" is another key.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infercrane.cli.main import main
from infercrane.cli.verify import sidecar_line
from infercrane.domain.aiperf_export import mooncake_jsonl
from infercrane.domain.attestation import export_statement, trace_statement
from infercrane.domain.digest import compute_digest
from infercrane.domain.trace import build_trace
from infercrane.domain.windows import Window
from tests.fakes import BASE_MS, LocalKeySigner, observation

SIGNER = LocalKeySigner()


def document(source: str = "captured", n: int = 6) -> dict:
    return build_trace(deployment="coder", window=Window(BASE_MS, BASE_MS + 60_000),
                       max_requests=100, truncated=False,
                       observations=[observation(i, source=source) for i in range(n)],
                       built_at=datetime(2026, 11, 29, tzinfo=UTC))


def saved(tmp_path: Path, doc: dict, *, signed_as: dict | None = None,
          signer: LocalKeySigner = SIGNER) -> Path:
    """The file `replay --save` writes, with its sidecar signed over `signed_as` (default: doc)."""
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    envelope = signer.sign(trace_statement(signed_as or doc))
    (tmp_path / "trace.json.intoto.jsonl").write_text(sidecar_line(envelope))
    return path


@pytest.fixture
def key(tmp_path: Path) -> Path:
    pem = tmp_path / "signing-key.pem"
    pem.write_text(SIGNER.public_key_pem())
    return pem


def run(capsys, *args: str) -> tuple[int, dict]:
    with pytest.raises(SystemExit) as done:
        main(["--output", "json", "--endpoint", "", "trace", "verify", *args])
    out = capsys.readouterr().out
    return int(done.value.code), json.loads(out) if out.strip() else {}


def failing(result: dict) -> list[str]:
    return [r["check"] for r in result["rows"] if not r["ok"]]


def test_an_untouched_document_passes_offline(tmp_path, key, capsys):
    code, result = run(capsys, str(saved(tmp_path, document())), "--public-key", str(key))
    assert code == 0
    assert result["verified"] is True
    assert [r["check"] for r in result["rows"]] == [
        "signature", "digest", "blocks", "schema", "statistics", "evidence class"]


def test_a_reformatted_document_still_passes(tmp_path, key, capsys):
    doc = document()
    path = saved(tmp_path, doc)
    path.write_text(json.dumps(doc, indent=3, sort_keys=True, ensure_ascii=True))
    assert run(capsys, str(path), "--public-key", str(key))[0] == 0


def test_a_forged_document_with_its_digest_recomputed_fails_the_digest_row(tmp_path, key, capsys):
    original = document()
    forged = json.loads(json.dumps(original))
    forged["records"][2]["output_tokens"] += 1
    forged["statistics"]["output_tokens"]["max"] = max(
        r["output_tokens"] for r in forged["records"])
    forged["digest"] = compute_digest(forged)
    code, result = run(capsys, str(saved(tmp_path, forged, signed_as=original)),
                       "--public-key", str(key))
    assert code == 5
    assert "digest" in failing(result)


def test_an_imported_trace_relabelled_observed_fails_the_evidence_row(tmp_path, key, capsys):
    doc = document(source="imported")
    relabelled = {**doc, "evidence_class": "observed"}
    relabelled["digest"] = compute_digest(relabelled)
    code, result = run(capsys, str(saved(tmp_path, relabelled, signed_as=doc)),
                       "--public-key", str(key))
    assert code == 5
    assert {"digest", "evidence class"} <= set(failing(result))


@pytest.mark.parametrize(("change", "rows"), [
    (lambda d: d.update(sample_count="lots"), {"schema", "statistics"}),
    (lambda d: d["records"][0].update(input_tokens=-5), {"schema", "statistics"}),
    (lambda d: d["statistics"].update(peak_concurrency=99), {"statistics"}),
])
def test_schema_and_statistics_rows_catch_what_a_signed_forger_would_change(
        tmp_path, key, capsys, change, rows):
    # Even signed (a compromised build signing whatever it is given), the content must hold up.
    doc = document()
    change(doc)
    doc["digest"] = compute_digest(doc)
    code, result = run(capsys, str(saved(tmp_path, doc)), "--public-key", str(key))
    assert code == 5
    assert set(failing(result)) == rows


def test_a_document_signed_by_another_stacks_key_fails_the_signature_row(tmp_path, key, capsys):
    path = saved(tmp_path, document(), signer=LocalKeySigner())
    code, result = run(capsys, str(path), "--public-key", str(key))
    assert code == 5
    assert failing(result)[0] == "signature"


def test_without_an_attestation_nothing_is_verified(tmp_path, key, capsys):
    path = saved(tmp_path, document())
    (tmp_path / "trace.json.intoto.jsonl").unlink()
    code, result = run(capsys, str(path), "--public-key", str(key))
    assert code == 5
    assert failing(result) == ["signature", "digest", "blocks"]


def test_an_exported_file_verifies_against_its_sidecar_and_a_changed_byte_fails(
        tmp_path, key, capsys):
    doc = document()
    body = mooncake_jsonl(doc).encode()
    exported = tmp_path / "trace.jsonl"
    exported.write_bytes(body)
    statement = export_statement("trace.jsonl", body, doc)
    assert statement["subject"][0]["digest"]["sha256"] == hashlib.sha256(body).hexdigest()
    (tmp_path / "trace.jsonl.intoto.jsonl").write_text(sidecar_line(SIGNER.sign(statement)))
    code, result = run(capsys, str(exported), "--public-key", str(key))
    assert (code, [r["check"] for r in result["rows"]]) == (0, ["signature", "digest"])
    exported.write_bytes(body.replace(b'"output_length":', b'"output_length": ', 1))
    code, result = run(capsys, str(exported), "--public-key", str(key))
    assert (code, failing(result)) == (5, ["digest"])


def _tamper(value):
    """Another value of the same JSON type where one exists (so only the signature can tell)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value[1:]] if value else ["x"]
    return {**value, "injected": 1} if isinstance(value, dict) else "x"


BLOCKS = sorted(document())


@pytest.mark.parametrize("block", BLOCKS)
def test_tampering_with_any_block_of_a_served_document_fails_naming_it(
        tmp_path, key, capsys, block):
    # Every top-level block, `build` and `digest` included: each is covered by the signature.
    original = document()
    tampered = json.loads(json.dumps(original))
    tampered[block] = _tamper(tampered[block])
    if block != "digest":
        tampered["digest"] = compute_digest(tampered)  # the forger recomputes what they can
    code, result = run(capsys, str(saved(tmp_path, tampered, signed_as=original)),
                       "--public-key", str(key))
    assert code == 5
    blocks = next(r for r in result["rows"] if r["check"] == "blocks")
    assert blocks["ok"] is False
    assert block in blocks["detail"]


def test_a_rewritten_build_block_alone_fails_only_the_blocks_row(tmp_path, key, capsys):
    original = document()
    rebuilt = {**original, "build": {**original["build"], "software": "infercrane 99",
                                     "built_at": "2020-01-01T00:00:00.000Z"}}
    assert compute_digest(rebuilt) == original["digest"]  # the digest cannot see it
    code, result = run(capsys, str(saved(tmp_path, rebuilt, signed_as=original)),
                       "--public-key", str(key))
    assert (code, failing(result)) == (5, ["blocks"])
    assert "build" in result["rows"][2]["detail"]


def test_an_added_top_level_field_is_named_unsigned(tmp_path, key, capsys):
    original = document()
    padded = {**original, "note": "trust me"}
    code, result = run(capsys, str(saved(tmp_path, padded, signed_as=original)),
                       "--public-key", str(key))
    assert code == 5
    assert "note (unsigned)" in result["rows"][2]["detail"]


def test_a_statement_without_blocks_says_the_build_block_is_not_covered(tmp_path, key, capsys):
    doc = document()
    legacy = trace_statement(doc)
    del legacy["predicate"]["blocks"]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    (tmp_path / "trace.json.intoto.jsonl").write_text(sidecar_line(SIGNER.sign(legacy)))
    code, result = run(capsys, str(path), "--public-key", str(key))
    assert (code, failing(result)) == (5, ["blocks"])
    assert "not covered: build" in result["rows"][2]["detail"]
