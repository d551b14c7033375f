"""What an observation batch came to: `domain/batch.py`'s result plus the store's counts, and
OTLP's span counts and partial-success shape."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infercrane.domain import batch
from infercrane.ports.observations import WriteStats


@dataclass
class IngestResult(batch.IngestResult):
    stats: WriteStats = field(default_factory=lambda: WriteStats(0, 0, 0))

    def to_document(self) -> dict[str, Any]:
        # `stored` + `already_present` = accepted: a re-sent item is accepted but not new.
        return {"accepted": self.accepted, "rejected": self.rejected,
                "stored": self.stats.items, "already_present": self.stats.skipped,
                "errors": [e.to_document() for e in self.errors]}


@dataclass
class OtlpResult(IngestResult):
    spans: int = 0
    ignored_spans: int = 0
    dropped_attributes: int = 0
    dropped_content_attributes: int = 0

    def to_document(self) -> dict[str, Any]:
        doc = super().to_document()
        doc.update(spans=self.spans, ignored_spans=self.ignored_spans,
                   dropped_attributes=self.dropped_attributes,
                   dropped_content_attributes=self.dropped_content_attributes)
        if self.rejected:
            # OTLP's own partial-success shape, so collectors log the rejection.
            doc["partialSuccess"] = {"rejectedSpans": self.rejected,
                                     "errorMessage": "Some spans were rejected; see errors."}
        return doc
