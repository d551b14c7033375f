"""The queue path: gateway-signed messages verified, validated and buffered, then stored in one
write per SQS batch (`QueueIntake`)."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infercrane.domain import signing
from infercrane.domain.batch import MAX_BATCH
from infercrane.domain.capture.items import IDENTITY_FIELDS, body_fields
from infercrane.domain.identity import PSEUDONYM_RE
from infercrane.domain.observation import StoredObservation
from infercrane.domain.validation import TENANT_RE
from infercrane.errors import DependencyUnavailable, NotFound
from infercrane.ports.observations import WriteStats

if TYPE_CHECKING:
    from infercrane.domain.capture.service import CaptureService

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueMessage:
    message_id: str
    body: str
    attributes: Mapping[str, str]  # String message attributes


def _raw_identity(item: Mapping[str, Any]) -> bool:
    """Whether an identity field holds anything but a pseudonym (a raw id, or something else)."""
    values = [item.get(f) for f in IDENTITY_FIELDS]
    blocks = item.get("prefix_block_ids")
    values += blocks if isinstance(blocks, list) else [blocks]
    return any(v is not None and not (isinstance(v, str) and PSEUDONYM_RE.match(v)) for v in values)


class QueueIntake:
    """One SQS batch: verify and validate each message, then store all of them in one write.

    `accept` consumes a message for good (returns a verdict) unless a dependency fails, in
    which case it raises `DependencyUnavailable` and the message is retried. `commit` writes what
    was buffered and returns the message ids to retry if that write failed. Messages that are
    unsigned, badly signed, carry a body or are malformed are consumed and counted: retrying them
    could only move them (and whatever they carry) into the DLQ.
    """

    def __init__(self, service: CaptureService):
        self._service = service
        self._pending: list[tuple[str, list[StoredObservation]]] = []
        self.verdicts: Counter[str] = Counter()
        self.items: Counter[str] = Counter()

    def _drop(self, reason: str) -> str:
        self.verdicts[reason] += 1
        return reason

    def accept(self, message: QueueMessage) -> str:
        """The verdict on one message. Only `DependencyUnavailable` escapes (the message is then
        retried); any other failure means the message cannot be read, verified or validated, so
        it is consumed and counted as `unreadable`, logged by message id and error class only
        (an exception's text may quote the body)."""
        try:
            return self._accept(message)
        except DependencyUnavailable:
            raise
        except Exception as exc:  # the one place where any failure is a verdict
            log.warning("capture message %s consumed unread: %s", message.message_id,
                        type(exc).__name__)
            return self._drop("unreadable")

    def _accept(self, message: QueueMessage) -> str:
        attrs = message.attributes
        tenant, version, signature = (attrs.get(signing.ATTR_TENANT),
                                      attrs.get(signing.ATTR_KEY_VERSION),
                                      attrs.get(signing.ATTR_SIGNATURE))
        if not tenant or not version or not signature:
            return self._drop("unsigned")
        # Content checks come before anything that can fail transiently (the keyring read): a
        # message that may be retried, and so may end in the DLQ, never holds a body or a raw id.
        try:
            document = json.loads(message.body)
        except (ValueError, RecursionError):  # RecursionError: JSON nested ~1000+ deep
            return self._drop("malformed")
        items = document.get("items") if isinstance(document, dict) and "items" in document \
            else [document]
        if not isinstance(items, list) or not items or len(items) > MAX_BATCH:
            return self._drop("malformed")
        if any(isinstance(i, Mapping) and body_fields(i) for i in items):
            self.items["rejected"] += len(items)
            return self._drop("body_field")
        if any(isinstance(i, Mapping) and _raw_identity(i) for i in items):
            self.items["rejected"] += len(items)
            return self._drop("raw_identity")
        if not TENANT_RE.match(tenant):
            return self._drop("unknown_tenant")
        try:
            keyring = self._service.keyring(tenant)
        except NotFound:
            return self._drop("unknown_tenant")
        if not signing.verify(message.body, signature, keyring.ingest, version):
            return self._drop("bad_signature")
        good, result = self._service.prepare(tenant, items, identities="pseudonymized")
        self.items["accepted"] += result.accepted
        self.items["rejected"] += result.rejected
        for err in result.errors:
            self.items[f"rejected_{err.code}"] += 1
        if good:
            self._pending.append((message.message_id, good))
        self.verdicts["accepted"] += 1
        return "accepted"

    def commit(self) -> tuple[list[str], WriteStats]:
        """Store every buffered observation; (message ids to retry, write stats)."""
        observations = [o for _, batch in self._pending for o in batch]
        if not observations:
            return [], WriteStats(0, 0, 0)
        try:
            stats = self._service.store(observations)
        except DependencyUnavailable:
            log.warning("observation store unavailable; %d messages will be retried",
                        len(self._pending))
            return [mid for mid, _ in self._pending], WriteStats(0, 0, 0)
        # Refused for a reason of their own: counted like invalid items, never retried.
        for code in stats.refused.values():
            self.items["accepted"] -= 1
            self.items["rejected"] += 1
            self.items[f"rejected_{code}"] += 1
        return [], stats
