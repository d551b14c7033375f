"""`infercrane trace verify`'s checks, one row each: signature, digest, blocks, schema,
statistics, evidence class (a trace document), or signature and digest (an exported file).

"Verified" means every row passed: the service's key signed a statement naming exactly this
content and every block of the document (the volatile `build` block included), the content
matches its digest and the published JSON Schema, and the statistics and labels it states are the
ones its records give. A forged file fails even with its digest recomputed: the signed statement
still names the original content, and the `blocks` row names each block that changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infercrane.domain.attestation import (
    PREDICATE_AIPERF_EXPORT,
    PREDICATE_COMPARISON,
    PREDICATE_TRACE,
    block_sha256,
    names_digest,
    signed_blocks,
    subject_sha256,
)
from infercrane.domain.digest import canonical_bytes, verify_digest
from infercrane.domain.drift import SCHEMA as COMPARISON_SCHEMA
from infercrane.domain.stats import compute_statistics
from infercrane.domain.trace import evidence_labels, json_schema
from infercrane.errors import InvalidInput

SIDECAR_SUFFIX = ".intoto.jsonl"


@dataclass(frozen=True)
class Row:
    check: str
    ok: bool
    detail: str

    def to_document(self) -> dict[str, Any]:
        return {"check": self.check, "ok": self.ok, "detail": self.detail}


def read_sidecar(text: str) -> dict[str, Any]:
    """The first DSSE envelope of an `.intoto.jsonl` file (one envelope per line)."""
    for line in text.splitlines():
        if line.strip():
            envelope = json.loads(line)
            if isinstance(envelope, dict):
                return envelope
            break
    raise ValueError("no envelope")


def sidecar_line(envelope: Mapping[str, Any]) -> str:
    return json.dumps(envelope, separators=(",", ":")) + "\n"


def signature_row(envelope: Mapping[str, Any] | None, public_key_pem: str
                  ) -> tuple[Row, dict[str, Any] | None]:
    from infercrane.adapters.dsse import verify_envelope  # securesystemslib: loaded when used

    if envelope is None:
        return Row("signature", False, "no attestation: pass --attestation, keep the "
                   f"{SIDECAR_SUFFIX} file beside it, or verify by digest against the service"), None
    try:
        statement = verify_envelope(envelope, public_key_pem)
    except InvalidInput as exc:
        return Row("signature", False, exc.message), None
    keyid = str((envelope.get("signatures") or [{}])[0].get("keyid", ""))[:16]
    return Row("signature", True, f"DSSE envelope signed by key {keyid}…"), statement


def _schema_row(document: Mapping[str, Any]) -> Row:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(json_schema())
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    if not errors:
        return Row("schema", True, "valid infercrane.replay.trace/v1 (trace.v1.json)")
    first = errors[0]
    where = "/".join(str(p) for p in first.absolute_path) or "(document)"
    return Row("schema", False, f"{len(errors)} violation(s); first at {where}: "
                                f"fails '{first.validator}'")


def _same(a: Any, b: Any) -> bool:
    try:
        return canonical_bytes(a) == canonical_bytes(b)
    except InvalidInput:
        return False


def _statistics_row(document: Mapping[str, Any], records: list[Any] | None) -> Row:
    if records is None:
        return Row("statistics", False, "the records cannot be read, so nothing can be recomputed")
    try:
        recomputed = compute_statistics(records)
    except (KeyError, TypeError, ValueError):
        return Row("statistics", False, "the records cannot be read, so nothing can be recomputed")
    stated = document.get("statistics")
    stated = stated if isinstance(stated, Mapping) else {}
    wrong = sorted(k for k in set(recomputed) | set(stated)
                   if not _same(recomputed.get(k), stated.get(k)))
    if document.get("sample_count") != len(records):
        wrong.insert(0, "sample_count")
    if wrong:
        return Row("statistics", False, "differ from the records: " + ", ".join(wrong))
    return Row("statistics", True, f"recomputed from {len(records):,} records")


def _evidence_row(document: Mapping[str, Any], records: list[Any] | None) -> Row:
    if records is None:
        return Row("evidence class", False, "the records cannot be read")
    try:
        labels = evidence_labels(records)
    except (KeyError, TypeError):
        return Row("evidence class", False, "a record lacks its source or timing_source")
    wrong = [f"{k} {document.get(k)!s} (records give {v})" for k, v in labels.items()
             if document.get(k) != v]
    if wrong:
        return Row("evidence class", False, "; ".join(wrong))
    return Row("evidence class", True, f"{labels['evidence_class']}, timing "
                                       f"{labels['timing_source']}, as the records' sources give")


def _block_changed(value: Any, signed: str | None) -> bool:
    try:
        return signed is None or block_sha256(value) != signed
    except InvalidInput:
        return True


def blocks_row(document: Mapping[str, Any], statement: Mapping[str, Any] | None) -> Row:
    """Every top-level block of the document is the one the statement signs; names the others.

    The digest row proves the content; this row covers what the digest leaves out (`build`) and
    names what changed, so a user sees *which* part of a document was altered."""
    if statement is None:
        return Row("blocks", False, "no verified signature covers any block")
    signed = signed_blocks(statement)
    if signed is None:
        return Row("blocks", False, "the signed statement covers the content digest only; "
                                    "not covered: build")
    changed = [name for name in sorted(set(document) | set(signed)) if name != "digest"
               and (name not in document or _block_changed(document[name], signed.get(name)))]
    if subject_sha256(statement) != str(document.get("digest", "")).removeprefix("sha256:"):
        changed.append("digest")
    if changed:
        return Row("blocks", False, "not as signed: " + ", ".join(
            f"{n} (unsigned)" if n not in signed and n != "digest" else
            f"{n} (missing)" if n not in document else n for n in changed))
    return Row("blocks", True, f"all {len(signed) + 1} blocks are as signed, build included")


def is_comparison(document: Mapping[str, Any]) -> bool:
    return document.get("schema") == COMPARISON_SCHEMA


def verify_trace(document: Mapping[str, Any], envelope: Mapping[str, Any] | None,
                 public_key_pem: str) -> list[Row]:
    """A trace document; a drift comparison (`trace compare --save`) gets the signature and
    digest rows, its figures being the service's computation over the two signed traces it names."""
    signature, statement = signature_row(envelope, public_key_pem)
    rows = [signature]
    predicate = PREDICATE_COMPARISON if is_comparison(document) else PREDICATE_TRACE
    try:
        matches, recomputed = verify_digest(document)
    except InvalidInput:
        matches, recomputed = False, "(not canonicalizable)"
    if not matches:
        rows.append(Row("digest", False, f"content gives {recomputed}, the document records "
                                         f"{document.get('digest')}"))
    elif statement is not None and not names_digest(statement, recomputed, predicate):
        rows.append(Row("digest", False, f"content gives {recomputed}, but the signed statement "
                                         f"names sha256:{subject_sha256(statement)}"))
    elif statement is None:
        rows.append(Row("digest", False, f"content matches {recomputed}, but no verified "
                                         "signature vouches for it"))
    else:
        rows.append(Row("digest", True, f"content matches {recomputed}, the digest signed"))
    rows.append(blocks_row(document, statement))
    if is_comparison(document):
        return rows
    rows.append(_schema_row(document))
    raw = document.get("records")
    records = raw if isinstance(raw, list) and all(isinstance(r, Mapping) for r in raw) else None
    rows.append(_statistics_row(document, records))
    rows.append(_evidence_row(document, records))
    return rows


def verify_file(body: bytes, envelope: Mapping[str, Any] | None, public_key_pem: str) -> list[Row]:
    """An exported file (AIPerf JSONL): the signed statement names the SHA-256 of its bytes."""
    signature, statement = signature_row(envelope, public_key_pem)
    actual = hashlib.sha256(body).hexdigest()
    if statement is None:
        digest = Row("digest", False, f"sha256:{actual}, but no verified signature vouches for it")
    elif names_digest(statement, actual, PREDICATE_AIPERF_EXPORT):
        digest = Row("digest", True, f"the file's sha256:{actual} is the digest signed")
    else:
        digest = Row("digest", False, f"the file gives sha256:{actual}, the signed statement "
                                      f"names sha256:{subject_sha256(statement)}")
    return [signature, digest]
