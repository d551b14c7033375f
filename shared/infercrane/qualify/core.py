"""The qualification suite's frame: checks, one result per promise, the table.

A promise module exposes `PROMISE` (its row name) and `run(target) -> PromiseResult`; its check
functions take every dependency (HTTP client, storage reader, log reader, clocks) as parameters so
tests can hand them a double that breaks the promise and watch the row fail.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Check:
    """One thing tried. `name` is stable across runs (it is digested); `detail` is diagnostics."""

    name: str
    passed: bool
    detail: str = ""


@dataclass
class PromiseResult:
    promise: str
    tried: str = ""
    checks: list[Check] = field(default_factory=list)
    unavailable: str | None = None
    # Stable facts worth keeping as evidence (digested): counts, digests of fixed data, methods.
    facts: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str, passed: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(passed), detail))
        return bool(passed)

    def not_available(self, what: str) -> PromiseResult:
        """A capability the promise needs has not landed: the row fails and says what is missing."""
        self.unavailable = what
        return self

    @property
    def passed(self) -> int:
        return sum(c.passed for c in self.checks)

    @property
    def failed(self) -> int:
        return len(self.checks) - self.passed + (1 if self.unavailable else 0)

    @property
    def ok(self) -> bool:
        return self.unavailable is None and bool(self.checks) and self.failed == 0

    @property
    def summary(self) -> str:
        if self.unavailable:
            return f"not available: {self.unavailable}"
        return self.tried

    def failures(self, limit: int = 10) -> list[Check]:
        return [c for c in self.checks if not c.passed][:limit]

    def to_evidence(self) -> dict[str, Any]:
        """The digested part: names and verdicts only, nothing that differs between two runs."""
        return {"promise": self.promise, "ok": self.ok, "tried": self.tried,
                "unavailable": self.unavailable, "checks": len(self.checks),
                "passed": self.passed, "failed": self.failed,
                "results": [{"name": c.name, "passed": c.passed} for c in self.checks],
                "facts": self.facts}


def guarded(promise: str, fn: Callable[[], PromiseResult]) -> PromiseResult:
    """Run one promise; a crash is a failed row (with its traceback as diagnostics), never a
    crashed run."""
    try:
        return fn()
    except Exception as exc:  # the suite reports, it does not stop
        result = PromiseResult(promise, tried="crashed before finishing")
        result.check(f"{promise} ran to completion", False,
                     f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")
        return result


def table_rows(results: Sequence[PromiseResult]) -> list[list[Any]]:
    return [[r.promise, len(r.checks) + (1 if r.unavailable else 0), r.passed, r.failed,
             "PASS" if r.ok else "FAIL", r.summary] for r in results]


TABLE_COLUMNS = ["promise", "checks", "passed", "failed", "verdict", "what was tried"]
