"""Import records: one import per (deployment, rows), so the same rows are never silently doubled.

`infercrane capture import` registers an import (its id digests the rows, format and options;
see `domain/importers.py`) before it sends any observation. The record is keyed by the digest of
the import's canonical rows (`file_sha256`, a name kept from when it digested the file's bytes),
so the same rows in another file, encoding or compression are the same import:
- no record yet: recorded, `new`;
- the same import id: `same` (a re-run or a resumed import; its rows are already present or
  are added, never doubled);
- another import id (the same rows under another `--start` or other options): refused with 409,
  or, with `replace`, the first import's observations are deleted and the new one recorded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from infercrane.clock import rfc3339
from infercrane.domain.capture import TimingModelIn
from infercrane.domain.validation import NAME_PATTERN, SHA256_HEX_PATTERN, BoundedTime
from infercrane.domain.windows import epoch_ms, from_epoch_ms
from infercrane.errors import Conflict
from infercrane.ports.imports import ImportedObservations, ImportStore

# `imp-` + 24 hex digits of a digest (made in `domain/importers.import_id`, CLI side). Defined
# here, in the deployed module: the importers are not part of the function artifacts.
IMPORT_ID_PATTERN = r"^imp-[0-9a-f]{24}$"


class ImportOptionsIn(BaseModel):
    """The options an import was made with, exactly the set the CLI sends
    (`ImportOptions.recorded()`): closed, every value a bounded number, enum, identifier or time,
    so a record holds no text a client chose beyond identifiers."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, frozen=True)

    start: BoundedTime | None = None
    block_size: int | None = Field(default=None, ge=1, le=1_000_000)
    timestamp_unit: Literal["s", "ms", "us"] | None = None
    revision: str | None = Field(default=None, pattern=NAME_PATTERN)
    timing_model: TimingModelIn | None = None
    session_history: Literal["cumulative", "incremental"] | None = None


def recorded_options(options: ImportOptionsIn | Mapping[str, Any]) -> dict[str, Any]:
    """The options as the record holds them: what the client sent, as the closed model prints it.
    The CLI and the service both digest this form, so the id prefix the service computes for
    `--replace` is the one the CLI gave the rows, however the client spelled a time."""
    model = options if isinstance(options, ImportOptionsIn) else ImportOptionsIn.model_validate(dict(options))
    return model.model_dump(mode="json", exclude_unset=True)


def options_digest(fmt: str, options: ImportOptionsIn | Mapping[str, Any]) -> str:
    """SHA-256 of an import's format and options (RFC 8785). The importer's provenance is
    `<format>:sha256:<this>`; its observation ids begin with `id_prefix` of it and of the rows
    digest: the same rows under the same options have the same ids and content from any file,
    so they are stored once."""
    return hashlib.sha256(rfc8785.dumps({"format": fmt, "options": recorded_options(options)})).hexdigest()


def id_prefix(fmt: str, options: ImportOptionsIn | Mapping[str, Any], rows_sha256: str) -> str:
    """The prefix of an import's observation ids: its rows digest (independent of the file's
    bytes, encoding and compression), format and options. The rows are part of it because
    `--replace` deletes by this prefix: two imports of other rows under the same options must
    not share it, or replacing one would delete the other's observations and claims."""
    canon = rfc8785.dumps({"rows": rows_sha256, "options": options_digest(fmt, options)})
    return f"imp-{hashlib.sha256(canon).hexdigest()[:16]}-"


class ImportIn(BaseModel):
    """What the CLI registers before sending an import's observations (closed and bounded)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, frozen=True)

    deployment: str = Field(pattern=NAME_PATTERN)
    import_id: str = Field(pattern=IMPORT_ID_PATTERN)
    file_sha256: str = Field(pattern=SHA256_HEX_PATTERN)
    format: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")
    options: ImportOptionsIn = Field(default_factory=ImportOptionsIn)
    records: int = Field(ge=0, le=1_000_000_000)
    # The same bounds as every time the service parses: out of range is a 422, never a 500 when
    # the record's epoch milliseconds are computed.
    first_arrival: BoundedTime | None = None
    last_arrival: BoundedTime | None = None
    replace: StrictBool = False


def _epoch_ms(value: datetime | None) -> int | None:
    return None if value is None else epoch_ms(value)


class ImportService:
    def __init__(self, records: ImportStore, observations: ImportedObservations):
        self._records = records
        self._observations = observations

    def register(self, tenant: str, request: ImportIn, now_iso: str) -> dict[str, Any]:
        record = {
            "deployment": request.deployment, "import_id": request.import_id,
            "file_sha256": request.file_sha256, "format": request.format,
            "options": recorded_options(request.options),
            "records": request.records,
            "first_arrival_ms": _epoch_ms(request.first_arrival),
            "last_arrival_ms": _epoch_ms(request.last_arrival),
            "id_prefix": id_prefix(request.format, request.options, request.file_sha256),
            "registered_at": now_iso,
        }
        existing = self._records.get(tenant, request.deployment, request.file_sha256)
        if existing is not None and existing["import_id"] == request.import_id:
            return {**existing, "status": "same", "replaced": None, "deleted": 0}
        if existing is None:
            if self._records.put(tenant, record, None):
                return {**record, "status": "new", "replaced": None, "deleted": 0}
            return self.register(tenant, request, now_iso)  # registered concurrently
        if not request.replace:
            raise Conflict("This file was already imported into this deployment with other "
                           "options or another start; pass --replace to replace that import.",
                           field="import_id", code="import_conflict")
        deleted = 0
        if existing.get("first_arrival_ms") is not None:
            # Records made before row identity named their observations `<import id>-<line>`.
            prefix = existing.get("id_prefix") or str(existing["import_id"]) + "-"
            deleted = self._observations.delete_import(
                tenant, request.deployment, int(existing["first_arrival_ms"]),
                int(existing["last_arrival_ms"]) + 1, str(prefix))
        if not self._records.put(tenant, record, str(existing["import_id"])):
            raise Conflict("This import changed while it was being replaced; try again.",
                           field="import_id", code="import_conflict")
        return {**record, "status": "replaced", "replaced": existing["import_id"],
                "deleted": deleted}


def describe(record: dict[str, Any]) -> dict[str, Any]:
    """The record as the API shows it (times as RFC 3339)."""
    out = dict(record)
    for name in ("first_arrival_ms", "last_arrival_ms"):
        value = out.pop(name, None)
        out[name.removesuffix("_ms")] = None if value is None else rfc3339(
            from_epoch_ms(int(value)))
    return out
