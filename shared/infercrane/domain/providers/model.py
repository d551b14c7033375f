"""Verdicts and assessments the pure rules return, and the one error adapters raise for a provider
call that failed (its raw code and message go to the capacity classifier, never to a user)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from infercrane.domain.validation import DIGEST
from infercrane.errors import DomainError

BINDING_PREFIX = "infercrane-model="
_BINDING = re.compile(rf"{re.escape(BINDING_PREFIX)}({DIGEST})(?![0-9a-f])")

SourceStatus = Literal["ok", "wait", "fail"]
State = Literal["present", "prefetching", "missing", "failed"]


def binding(model: str) -> str:
    """The token that binds a provider artifact to a model-identity digest (set at creation in an
    immutable field: EBS snapshot Description, GCE disk/snapshot description)."""
    return f"{BINDING_PREFIX}{model}"


def bound_digests(text: str | None) -> list[str]:
    return _BINDING.findall(text or "")


def check_binding(text: str | None, model: str, where: str) -> str | None:
    """None when `text` binds exactly `model`; else the precise verification reason."""
    found = bound_digests(text)
    if not found:
        return f"verification_failed: digest not bound in {where}"
    if any(d != model for d in found):
        return f"verification_failed: digest mismatch in {where}"
    return None


@dataclass(frozen=True)
class Verdict:
    """Whether a source artifact (snapshot/image/VolumeSnapshot) may be prefetched."""

    status: SourceStatus
    reason: str | None = None
    evidence: dict[str, str] = field(default_factory=dict)

    @classmethod
    def ok(cls, **evidence: str) -> Verdict:
        return cls("ok", None, dict(evidence))

    @classmethod
    def wait(cls, reason: str, **evidence: str) -> Verdict:
        return cls("wait", reason, dict(evidence))

    @classmethod
    def fail(cls, reason: str, **evidence: str) -> Verdict:
        return cls("fail", reason, dict(evidence))


@dataclass(frozen=True)
class Assessment:
    """What a provider resource means for the cache: `failed` is a verification failure (the
    resource exists but breaks the contract), never `present`."""

    state: State
    reason: str | None = None
    evidence: dict[str, str] = field(default_factory=dict)


class ProviderCallFailed(DomainError):
    """A provider API call failed. `provider_code`/`provider_message` are the provider's raw
    values, kept for the classifier; `message` is a fixed sentence."""

    code = "provider_call_failed"

    def __init__(self, provider: str, provider_code: str | None, provider_message: str | None,
                 *, status: int | None = None):
        super().__init__("A provider API call failed.", field="provider")
        self.provider = provider
        self.provider_code = provider_code
        self.provider_message = provider_message
        self.status = status
