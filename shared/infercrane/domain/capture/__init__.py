"""Capture: the one ingest function behind every path (REST batch, OTLP, queue, importers).

Each item is validated on its own and either becomes a `StoredObservation` or an `ItemError`;
valid items are stored, invalid ones are not. Bodies never enter: an item holding a body-like
key at any depth is refused naming those keys, before any other error it has, and no message here
ever contains a submitted value.
Identities are pseudonymized with the tenant's identity key (`identities="raw"`, REST and OTLP)
or must already be pseudonyms made at the edge (`identities="pseudonymized"`, the queue).
The batch envelope, its limit, item errors and their codes are `domain/batch.py`'s, shared with
lifecycle ingest.

Modules, lowest first: `items` (the submitted observation, its limits and checks), `results`
(what a batch came to), `fingerprint` (the canonical content an observation's fingerprint is
taken over), `prepare` (one item validated, pseudonymized, fingerprinted, built), `service`
(`CaptureService`, what callers use) and `queue` (the signed-message path).

The names below are the package's public ones, each loaded from its module when first asked for
(`from infercrane.domain.capture import X` as before): importing the package loads none of its
modules, so a caller that needs a limit or the item schema (edge, importers, trace files) does not
load the ingest path, its fingerprint and OTLP mapping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infercrane.domain.lazy import exports

# The module each public name lives in (`batch`: infercrane.domain.batch, the shared contract).
_HOMES: dict[str, tuple[str, ...]] = {
    "batch": ("MAX_BATCH", "ItemError"),
    "items": ("IDENTITY_FIELDS", "MAX_LATENCY_MS", "MAX_MODEL_PARAMETER", "MAX_PREFIX_BLOCKS",
        "MAX_TOKENS", "PROVENANCE_PATTERN", "IdentityMode", "ObservationIn",
        "TimingModelIn", "batch_items", "body_fields", "parse_time"),
    "results": ("IngestResult", "OtlpResult"),
    "prepare": ("build",),
    "service": ("CaptureService",),
    "queue": ("QueueIntake", "QueueMessage"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

if TYPE_CHECKING:  # what the type checker reads; tests/unit/test_capture_package.py holds it to _HOMES
    from infercrane.domain.batch import MAX_BATCH, ItemError
    from infercrane.domain.capture.items import (
        IDENTITY_FIELDS,
        MAX_LATENCY_MS,
        MAX_MODEL_PARAMETER,
        MAX_PREFIX_BLOCKS,
        MAX_TOKENS,
        PROVENANCE_PATTERN,
        IdentityMode,
        ObservationIn,
        TimingModelIn,
        batch_items,
        body_fields,
        parse_time,
    )
    from infercrane.domain.capture.prepare import (
        build,
    )
    from infercrane.domain.capture.queue import (
        QueueIntake,
        QueueMessage,
    )
    from infercrane.domain.capture.results import (
        IngestResult,
        OtlpResult,
    )
    from infercrane.domain.capture.service import (
        CaptureService,
    )


__getattr__, __dir__ = exports(__name__, _HOME, globals())


__all__ = [
    "IDENTITY_FIELDS", "MAX_BATCH", "MAX_LATENCY_MS", "MAX_MODEL_PARAMETER", "MAX_PREFIX_BLOCKS",
    "MAX_TOKENS", "PROVENANCE_PATTERN", "CaptureService", "IdentityMode", "IngestResult",
    "ItemError", "ObservationIn", "OtlpResult", "QueueIntake", "QueueMessage",
    "TimingModelIn", "batch_items", "body_fields", "build", "parse_time",
]
