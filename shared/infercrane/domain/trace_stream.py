"""A trace document built from a stream of observations without holding its records.

`build_trace` keeps every record in memory; a 100,000-request trace is ~200 MB of JSON. Here each
observation becomes its record, whose RFC 8785 bytes are appended to a spool (a temporary file)
a batch at a time, while the fields that summarize all records (statistics, evidence class, key
versions, ...) accumulate. At the end the document is the canonical JSON of the same dict
`build_trace` returns: its other fields are canonicalized around the records
(`digest.canonical_around`), and the spool goes in between. RFC 8785 writes an array as `[` +
its canonical elements joined by `,` + `]`, so the bytes, and the digest, equal those of the
whole document.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat
from operator import attrgetter, sub
from typing import IO, Any

from infercrane.clock import rfc3339
from infercrane.domain.attestation import block_digests
from infercrane.domain.digest import VOLATILE_FIELDS, canonical_around
from infercrane.domain.observation import StoredObservation
from infercrane.domain.trace import (
    ENCODE_BATCH,
    HISTOGRAM_BINS,
    SCHEMA,
    RecordEncoder,
    arrival_bin,
    header_fields,
)
from infercrane.domain.windows import Window, from_epoch_ms
from infercrane.errors import InvalidInput

CHUNK_BYTES = 1 << 20
_arrival = attrgetter("arrival_ms")


@dataclass(frozen=True)
class StreamedTrace:
    """A finished build: `chunks()` yields the document's canonical bytes from the spool."""

    digest: str
    header: dict[str, Any]
    size_bytes: int
    blocks: dict[str, str]  # each top-level field's canonical SHA-256, for the signed statement
    _head: bytes
    _tail: bytes
    _spool: IO[bytes]

    def chunks(self) -> Iterator[bytes]:
        yield self._head
        yield from _read(self._spool)
        yield self._tail


def _read(spool: IO[bytes]) -> Iterator[bytes]:
    spool.seek(0)
    while chunk := spool.read(CHUNK_BYTES):
        yield chunk


def _split(document: dict[str, Any]) -> tuple[bytes, bytes]:
    """The document's canonical bytes around its records' array, whose elements are spooled."""
    head, tail = canonical_around(document, "records")
    return head + b"[", b"]" + tail


class StreamingTraceBuilder:
    """Feed observations in (arrival, id) order with `add`, then `finish`."""

    def __init__(self, *, deployment: str, window: Window, max_requests: int, spool: IO[bytes]):
        self._deployment = deployment
        self._window = window
        self._max_requests = max_requests
        self._spool = spool
        # The records block's canonical bytes are `[` + the spool + `]`: hashed as they are
        # written, so signing the block costs no second pass over the spool.
        self._records_sha256 = hashlib.sha256(b"[")
        # Records made, encoded and summarized a batch at a time as in memory, none kept.
        self._encoder = RecordEncoder(window.start_ms, keep=False)
        self._count = 0
        self._pending: list[StoredObservation] = []  # not yet encoded to the spool
        self._last: tuple[int, str] | None = None
        self._histogram = [0] * HISTOGRAM_BINS

    @property
    def count(self) -> int:
        return self._count

    def add(self, obs: StoredObservation) -> None:
        order = (obs.arrival_ms, obs.observation_id)
        if self._last is not None and order <= self._last:
            raise InvalidInput("Observations must arrive in (arrival, id) order.", field="records")
        self._last = order
        self._pending.append(obs)
        self._count += 1
        if len(self._pending) == ENCODE_BATCH:
            self._encode()

    def _encode(self) -> None:
        """Spool the pending observations' records (their bytes between the array's brackets,
        after a comma past the first batch) and fold them into the summaries."""
        batch = self._pending
        if not batch:
            return
        self._encoder.extend(batch)
        for chunk in self._encoder.take():
            self._spool.write(chunk)
            self._records_sha256.update(chunk)
        start, duration = self._window.start_ms, self._window.duration_ms
        for index in map(arrival_bin, map(sub, map(_arrival, batch), repeat(start)),
                         repeat(duration)):
            self._histogram[index] += 1
        self._pending = []

    def finish(self, *, truncated: bool, built_at: datetime, request_id: str | None = None,
               software: str | None = None,
               selection: dict[str, Any] | None = None,
               id_conflicts: int = 0) -> StreamedTrace:
        self._encode()
        window = self._window
        content: dict[str, Any] = {
            "schema": SCHEMA,
            "deployment": self._deployment,
            "window": {"start": rfc3339(from_epoch_ms(window.start_ms)),
                       "end": rfc3339(from_epoch_ms(window.end_ms)),
                       "duration_ms": window.duration_ms},
            "max_requests": self._max_requests,
            "sample_count": self._count,
            "truncated": truncated,
            **({} if selection is None else {"selection": selection}),
            **({"id_conflicts": id_conflicts} if id_conflicts else {}),
            **self._encoder.labels(),
            "records": [],  # the spool's: `_split` leaves them out
            "statistics": self._encoder.statistics.result(),
        }
        assert not VOLATILE_FIELDS & content.keys()
        self._spool.flush()
        head, tail = _split(content)
        digest = hashlib.sha256(head)
        for chunk in _read(self._spool):
            digest.update(chunk)
        digest.update(tail)
        document = {**content, "digest": "sha256:" + digest.hexdigest(),
                    "build": {"built_at": rfc3339(built_at), "request_id": request_id,
                              "software": software}}
        head, tail = _split(document)
        size = len(head) + self._spool.seek(0, 2) + len(tail)
        header = header_fields(document)
        header["created_at"] = document["build"]["built_at"]
        header["document"] = {"path": f"/v1/traces/{document['digest']}/document",
                              "size_bytes": size}
        header["arrival_histogram"] = {"bins": HISTOGRAM_BINS,
                                       "bin_ms": window.duration_ms / HISTOGRAM_BINS,
                                       "counts": list(self._histogram)}
        blocks = block_digests({k: v for k, v in document.items() if k != "records"})
        self._records_sha256.update(b"]")
        blocks["records"] = self._records_sha256.hexdigest()
        return StreamedTrace(document["digest"], header, size, blocks, head, tail, self._spool)
