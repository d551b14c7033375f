"""Signed evidence: in-toto Statements (v1) about what the service stores.

The service signs a Statement whose subject is a document's digest; the Statement travels in a
DSSE envelope (`ports/signing.py` signs, `adapters/dsse.py` wraps securesystemslib). This module
only says *what* is claimed: the statement's shape, its predicate types, and the check that a
signed statement names a given digest. It holds no key material and no crypto.

Subjects: a trace or execution evidence is named by its canonical digest (SHA-256 of the RFC 8785
form without `digest` and `build`, `domain/digest.py`); an exported file by the SHA-256 of its
bytes, so a standard tool (`cosign verify-blob-attestation`) can check the file as it is.

The digest leaves out the volatile `build` block so that the same observations give the same
digest; the signature must not leave it out, or anyone could rewrite who built a document and
when while it still verified. So a document's statement also carries `blocks`: the SHA-256 of the
RFC 8785 form of each top-level field but `digest` (the subject), `build` included. Together the
subject and the blocks cover every value of the document a user receives, and a verifier can name
the block that changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from infercrane.domain.digest import canonical_bytes
from infercrane.domain.validation import SHA256_HEX_RE

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TRACE = "https://infercrane.dev/attestation/replay-trace/v1"
PREDICATE_EXECUTION = "https://infercrane.dev/attestation/replay-execution/v1"
PREDICATE_AIPERF_EXPORT = "https://infercrane.dev/attestation/aiperf-export/v1"
PREDICATE_COMPARISON = "https://infercrane.dev/attestation/trace-comparison/v1"
CANONICAL = "sha256 of the RFC 8785 canonical JSON without `digest` and `build`"
BLOCK_METHOD = "sha256 of the RFC 8785 canonical JSON of each top-level field but `digest`"
SIGNING_SCHEME = "ecdsa-sha2-nistp256"
_HEX = SHA256_HEX_RE


def statement(subject_name: str, sha256_hex: str, predicate_type: str,
              predicate: Mapping[str, Any]) -> dict[str, Any]:
    if not _HEX.match(sha256_hex):
        raise ValueError("a subject digest is 64 lowercase hex digits")
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": subject_name, "digest": {"sha256": sha256_hex}}],
            "predicateType": predicate_type, "predicate": dict(predicate)}


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def block_sha256(value: Any) -> str:
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def block_digests(document: Mapping[str, Any]) -> dict[str, str]:
    """Each top-level field's canonical SHA-256, but the `digest` the subject already names."""
    return {name: block_sha256(value) for name, value in document.items() if name != "digest"}


def _covered(predicate: dict[str, Any], blocks: Mapping[str, str]) -> dict[str, Any]:
    return {**predicate, "block_method": BLOCK_METHOD, "blocks": dict(sorted(blocks.items()))}


def trace_statement(document: Mapping[str, Any],
                    blocks: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the service claims about a trace it built: these observations gave this content,
    and this build block says how. `blocks` defaults to those of `document`; a streamed build,
    which never holds its records, passes the ones it computed while spooling."""
    return statement(f"trace/{document['deployment']}", _hex(str(document["digest"])),
                     PREDICATE_TRACE, _covered({
                         "schema": document["schema"], "digest_method": CANONICAL,
                         "deployment": document["deployment"], "window": document["window"],
                         "sample_count": document["sample_count"],
                         "evidence_class": document["evidence_class"],
                         "timing_source": document["timing_source"]},
                         block_digests(document) if blocks is None else blocks))


def execution_statement(document: Mapping[str, Any]) -> dict[str, Any]:
    """What the service claims about execution evidence: it recorded this content, as posted
    (the measurements themselves come from the workstation that ran AIPerf)."""
    source = document.get("source") or {}
    return statement(f"execution/{document['execution_id']}", _hex(str(document["digest"])),
                     PREDICATE_EXECUTION, _covered({
                         "schema": document["schema"], "digest_method": CANONICAL,
                         "evidence_class": document["evidence_class"],
                         "status": document["status"],
                         "source_trace_digest": source.get("trace_digest"),
                         "recorded_by": "service (measurements reported by the client)"},
                         block_digests(document)))


def comparison_statement(document: Mapping[str, Any]) -> dict[str, Any]:
    """What the service claims about a drift comparison it computed from two stored traces."""
    return statement(f"trace-comparison/{_hex(str(document['digest']))[:16]}",
                     _hex(str(document["digest"])), PREDICATE_COMPARISON, _covered({
                         "schema": document["schema"], "digest_method": CANONICAL,
                         "a": document["a"]["digest"], "b": document["b"]["digest"],
                         "significance": document["significance"],
                         "verdict": document["verdict"]}, block_digests(document)))


def export_statement(file_name: str, body: bytes, trace: Mapping[str, Any]) -> dict[str, Any]:
    """An exported file (AIPerf mooncake JSONL) named by the SHA-256 of its bytes."""
    return statement(file_name, hashlib.sha256(body).hexdigest(), PREDICATE_AIPERF_EXPORT, {
        "format": "aiperf mooncake_trace JSONL", "source_trace_digest": trace["digest"],
        "deployment": trace["deployment"], "rows": trace["sample_count"]})


def signed_blocks(signed: Mapping[str, Any]) -> dict[str, str] | None:
    """The block digests a statement signs, or None for a statement that has none."""
    predicate = signed.get("predicate")
    blocks = predicate.get("blocks") if isinstance(predicate, Mapping) else None
    if not isinstance(blocks, Mapping) or not all(
            isinstance(v, str) and _HEX.match(v) for v in blocks.values()):
        return None
    return {str(k): v for k, v in blocks.items()}


def subject_sha256(signed: Mapping[str, Any]) -> str | None:
    """The single subject's sha256 hex of a statement, or None when it is not one we issue."""
    if signed.get("_type") != STATEMENT_TYPE:
        return None
    subjects = signed.get("subject")
    if not isinstance(subjects, list) or len(subjects) != 1 or not isinstance(subjects[0], dict):
        return None
    value = (subjects[0].get("digest") or {}).get("sha256")
    return value if isinstance(value, str) and _HEX.match(value) else None


def names_digest(signed: Mapping[str, Any], digest: str, predicate_type: str) -> bool:
    """The statement is of `predicate_type` and its one subject is `digest` (sha256:hex or hex)."""
    return (signed.get("predicateType") == predicate_type
            and subject_sha256(signed) == _hex(digest))
