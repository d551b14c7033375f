"""Where a segment lives and what it holds: its key, its id, its bytes and its index item.

A segment is one immutable object per stored batch and UTC hour of arrival (docs/capture.md,
Storage). Its rows are `domain.observation_rows` rows, one JSON object a line, sorted by
(arrival_ms, observation_id), gzip-compressed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from infercrane.domain.observation import StoredObservation
from infercrane.domain.observation_rows import SCHEMA_VERSION, from_rows, to_row

PREFIX: Final = "observations/"
# Level 1: capture's budget is CPU per observation; level 6 spent ~3x the CPU for ~15% fewer
# bytes on these rows (HMAC hex compresses little whatever the level), and bytes on S3 cost
# almost nothing beside a Lambda's milliseconds.
GZIP_LEVEL: Final = 1
# The day list of a deployment: pk `<tenant>#<deployment>#days`, sk `<YYYY-MM-DD>` (never a
# date, so never an index partition).
DAYS: Final = "days"


def day_of(ms: int) -> str:
    return datetime.fromtimestamp(max(ms, 0) / 1000, UTC).strftime("%Y-%m-%d")


def index_pk(tenant: str, deployment: str, day: str) -> str:
    return f"{tenant}#{deployment}#{day}"


def days_pk(tenant: str, deployment: str) -> str:
    return f"{tenant}#{deployment}#{DAYS}"


def identity(o: StoredObservation) -> tuple[str, str]:
    """What makes a row the same row: its id and its content's fingerprint (a derived `h-` id is
    its own). The pseudonyms are not part of it: after `admin hmac rotate` the same observations
    carry other HMACs but are still the same observations."""
    return o.observation_id, o.fingerprint or o.observation_id


def segment_id(tenant: str, deployment: str, hour_ms: int,
               identities: Iterable[tuple[str, str]]) -> str:
    """`s` + 32 hex of a SHA-256 over the rows' identities and where they live: the same rows
    re-sent map to the same key (and are `already_present`), other rows never do."""
    h = hashlib.sha256(f"v{SCHEMA_VERSION}\n{tenant}\n{deployment}\n{hour_ms}\n".encode())
    for oid, fp in sorted(identities):
        h.update(f"{oid}\t{fp}\n".encode())
    return "s" + h.hexdigest()[:32]


def object_key(tenant: str, deployment: str, hour_ms: int, seg_id: str) -> str:
    when = datetime.fromtimestamp(hour_ms / 1000, UTC)
    return (f"{PREFIX}tenant={tenant}/deployment={deployment}/date={when:%Y-%m-%d}/"
            f"hour={when:%H}/{seg_id}.json.gz")


def tenant_prefix(tenant: str) -> str:
    return f"{PREFIX}tenant={tenant}/"


def order(o: StoredObservation) -> tuple[int, str]:
    return o.arrival_ms, o.observation_id


def encode(rows: Sequence[StoredObservation]) -> bytes:
    """The object's bytes. `mtime=0`: the same rows give the same bytes (and sha256)."""
    text = "".join(json.dumps(to_row(o), separators=(",", ":")) + "\n"
                   for o in sorted(rows, key=order))
    return gzip.compress(text.encode(), compresslevel=GZIP_LEVEL, mtime=0)


def decode(tenant: str, deployment: str, body: bytes) -> list[StoredObservation]:
    """Every row of a segment's bytes, all or nothing (`parse`)."""
    return parse(tenant, deployment, gzip.decompress(body))


def parse(tenant: str, deployment: str, text: bytes) -> list[StoredObservation]:
    """Every row of a segment's decompressed bytes, all or nothing: raises (JSON, a row's
    KeyError or TypeError) before returning any row of a corrupt segment.

    The lines are parsed as one JSON array (one `json.loads`, half the CPU of one a line): a
    writer's line is one value and holds no raw newline (`json.dumps` escapes it). Bytes that do
    not parse so into one value a line (an empty line, a value spanning lines) are parsed line by
    line as before: empty lines skipped, a line that is not JSON raises, as SQL's readers do."""
    lines = text[:-1] if text.endswith(b"\n") else text
    try:
        rows = json.loads(b"[" + lines.replace(b"\n", b",") + b"]") if lines else []
    except ValueError:
        rows = None
    if rows is None or (lines and len(rows) != lines.count(b"\n") + 1):
        rows = [json.loads(line) for line in text.splitlines() if line]
    return from_rows(tenant, deployment, rows)


@dataclass(frozen=True)
class Segment:
    """A segment as its index item describes it."""

    tenant: str
    deployment: str
    seg_id: str
    key: str
    rows: int
    bytes: int
    min_arrival_ms: int
    max_arrival_ms: int
    sha256: str
    stored_at_ms: int
    expires_at: int  # epoch seconds: DynamoDB TTL
    # The object's version (the bucket is versioned): deleting that version deletes the bytes,
    # where deleting the key would only hide them behind a delete marker.
    version_id: str | None = None
    schema_version: int = SCHEMA_VERSION
    # Set by a deletion's rewrite in the same transaction that made the segment of its kept rows
    # visible: the rows are all deleted or in that segment, so whoever meets it removes it.
    retired: bool = False

    @property
    def pk(self) -> str:
        return index_pk(self.tenant, self.deployment, day_of(self.min_arrival_ms))

    @property
    def sk(self) -> str:
        return f"{self.min_arrival_ms:013d}#{self.seg_id}"

    def item(self) -> dict[str, dict[str, Any]]:
        item = {
            "pk": {"S": self.pk}, "sk": {"S": self.sk}, "key": {"S": self.key},
            "rows": {"N": str(self.rows)}, "bytes": {"N": str(self.bytes)},
            "min_arrival_ms": {"N": str(self.min_arrival_ms)},
            "max_arrival_ms": {"N": str(self.max_arrival_ms)},
            "sha256": {"S": self.sha256}, "stored_at_ms": {"N": str(self.stored_at_ms)},
            "schema_version": {"N": str(self.schema_version)},
            "expires_at": {"N": str(self.expires_at)},
        }
        if self.version_id is not None:
            item["version_id"] = {"S": self.version_id}
        return item

    @classmethod
    def from_item(cls, tenant: str, deployment: str, raw: dict[str, Any]) -> Segment:
        def n(name: str) -> int:
            return int(raw[name]["N"])

        return cls(tenant, deployment, seg_id=raw["sk"]["S"].split("#", 1)[1],
                   key=raw["key"]["S"], rows=n("rows"), bytes=n("bytes"),
                   min_arrival_ms=n("min_arrival_ms"), max_arrival_ms=n("max_arrival_ms"),
                   sha256=raw["sha256"]["S"], stored_at_ms=n("stored_at_ms"),
                   expires_at=n("expires_at"), schema_version=n("schema_version"),
                   version_id=raw["version_id"]["S"] if "version_id" in raw else None,
                   retired="retired" in raw)
