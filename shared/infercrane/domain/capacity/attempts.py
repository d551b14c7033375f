"""A lifecycle attempt as stored: its fields, its hour and group, and its failure classified."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from infercrane.domain.capacity.hours import hour_of

GROUP_DIMENSIONS = ("adapter", "runtime", "compute_mode", "region", "gpu")


@dataclass(frozen=True)
class StoredAttempt:
    tenant: str
    attempt_id: str
    deployment: str
    operation: str
    adapter: str
    runtime: str
    compute_mode: str
    region: str
    zone: str | None
    gpu: str
    gpu_count: int
    started_at_ms: int
    finished_at_ms: int | None
    outcome: str
    error_code: str | None
    error_message: str | None
    received_at_ms: int
    # Derived from (adapter, error_code, error_message) by `classifier_version`; None unless failed.
    failure_class: str | None
    persistent: bool
    rule: str | None
    classifier_version: str

    @property
    def hour(self) -> int:
        return hour_of(self.started_at_ms)

    @property
    def group(self) -> tuple[str, str, str, str, str]:
        return (self.adapter, self.runtime, self.compute_mode, self.region, self.gpu)

    @property
    def duration_ms(self) -> int | None:
        """Operation duration of a finished attempt; cancelled ones say nothing about duration."""
        if self.finished_at_ms is None or self.outcome == "cancelled":
            return None
        return self.finished_at_ms - self.started_at_ms


def classify_attempt(attempt: StoredAttempt, classify: Callable[..., Any],
                     version: str) -> StoredAttempt:
    if attempt.outcome != "failed":
        return replace(attempt, failure_class=None, persistent=False, rule=None,
                       classifier_version=version)
    c = classify(attempt.adapter, attempt.error_code, attempt.error_message)
    return replace(attempt, failure_class=c.failure_class, persistent=c.persistent, rule=c.rule,
                   classifier_version=version)
