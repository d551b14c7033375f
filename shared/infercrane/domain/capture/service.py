"""The capture service: the one ingest function behind every path (REST batch, OTLP, queue,
importers), and what else callers ask of observations (store prepared ones, delete)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from infercrane.clock import utcnow
from infercrane.domain.batch import ItemError
from infercrane.domain.capture.items import IdentityMode, _epoch_ms
from infercrane.domain.capture.prepare import _Batch, _Identities, build
from infercrane.domain.capture.results import IngestResult, OtlpResult
from infercrane.domain.observation import STORE_REFUSALS, StoredObservation
from infercrane.domain.otlp import OTLP_FIELD, OtlpOptions, map_document
from infercrane.domain.tenancy import Keyring, KeySet
from infercrane.domain.validation import deployment_name
from infercrane.ports.observations import ObservationStore, WriteStats
from infercrane.ports.secrets import KeyringStore

if TYPE_CHECKING:
    from infercrane.domain.capture.queue import QueueIntake


def _same(o: StoredObservation) -> tuple[str, str, str, str | None]:
    return o.tenant, o.deployment, o.sort_key, o.fingerprint


def _dedupe(observations: Iterable[StoredObservation]) -> list[StoredObservation]:
    # Re-sending the same observation inside one batch is accepted and changes nothing; DynamoDB
    # would refuse a BatchWriteItem holding one key twice. The same id with other content is not
    # the same observation: it stays, and the store refuses it as a conflict.
    seen: dict[tuple[str, str, str, str | None], StoredObservation] = {}
    for o in observations:
        seen.setdefault(_same(o), o)
    return list(seen.values())


class CaptureService:
    def __init__(self, store: ObservationStore, keyrings: KeyringStore,
                 clock: Callable[[], datetime] = utcnow):
        self._store = store
        self._keyrings = keyrings
        self._clock = clock

    def keyring(self, tenant: str) -> Keyring:
        return self._keyrings.get(tenant)

    def identity_keys(self, tenant: str) -> KeySet:
        return self._keyrings.get(tenant).identity

    def prepare(self, tenant: str, items: Sequence[Any], *, identities: IdentityMode = "raw",
                ) -> tuple[list[StoredObservation], IngestResult]:
        """Validate every item; (observations to store, result without write stats)."""
        indexed, result = self._prepare(tenant, items, identities)
        return [o for _, o in indexed], result

    def _prepare(self, tenant: str, items: Sequence[Any], identities: IdentityMode,
                 ) -> tuple[list[tuple[int, StoredObservation]], IngestResult]:
        now = self._clock()
        cached: list[KeySet] = []

        def keys() -> KeySet:
            if not cached:
                cached.append(self.identity_keys(tenant))
            return cached[0]

        batch = _Batch(tenant, _Identities(identities, keys), now)
        good: list[tuple[int, StoredObservation]] = []
        result = IngestResult()
        for index, item in enumerate(items):
            built = build(batch, index, item)
            if isinstance(built, StoredObservation):
                good.append((index, built))
            else:
                result.rejected += 1
                result.errors.extend(built)
        result.accepted = len(good)
        return good, result

    def ingest(self, tenant: str, items: Sequence[Any], *,
               identities: IdentityMode = "raw") -> IngestResult:
        """The ingest function: validate each item, pseudonymize, store the valid ones.

        All-or-item: an item the store refuses for a reason of its own (an id naming other
        content, an item it cannot hold) is rejected by index like an invalid one, and the rest
        are stored; only a transient failure raises (`DependencyUnavailable`, HTTP 503), and a
        re-send then converges to every valid item stored once."""
        indexed, result = self._prepare(tenant, items, identities)
        if not indexed:
            return result
        unique = _dedupe(o for _, o in indexed)
        result.stats = self._store.put_many(unique)
        refused = {_same(unique[i]): code for i, code in result.stats.refused.items()}
        for index, o in indexed:
            code = refused.get(_same(o))
            if code is not None:
                field_name, message = STORE_REFUSALS[code]
                result.accepted -= 1
                result.rejected += 1
                result.errors.append(ItemError(index, field_name, code, message))
        result.errors.sort(key=lambda e: e.index)
        return result

    def ingest_otlp(self, tenant: str, document: Any,
                    options: OtlpOptions | None = None) -> OtlpResult:
        """OTLP spans through the same ingest: errors name the span and its OTLP field."""
        mapping = map_document(document, options)
        result = self.ingest(tenant, mapping.items)
        errors = [ItemError(mapping.span_index[e.index], OTLP_FIELD.get(e.field or "", e.field),
                            e.code, e.message) for e in result.errors]
        return OtlpResult(result.accepted, result.rejected, errors, result.stats,
                          spans=mapping.spans, ignored_spans=mapping.ignored_spans,
                          dropped_attributes=mapping.dropped_attributes,
                          dropped_content_attributes=mapping.dropped_content_attributes)

    def store(self, observations: Sequence[StoredObservation]) -> WriteStats:
        return self._store.put_many(_dedupe(observations)) if observations else WriteStats(0, 0, 0)

    def delete(self, tenant: str, deployment: str, before: datetime | None = None) -> int:
        return self._store.delete(tenant, *self._deletion(deployment, before))

    def delete_page(self, tenant: str, deployment: str,
                    before: datetime | None = None) -> tuple[int, bool]:
        """One call's bounded part of `delete`: (rows deleted, whether finished)."""
        return self._store.delete_page(tenant, *self._deletion(deployment, before))

    @staticmethod
    def _deletion(deployment: str, before: datetime | None) -> tuple[str, int | None]:
        return deployment_name(deployment), None if before is None else _epoch_ms(before)

    def queue_intake(self) -> QueueIntake:
        from infercrane.domain.capture.queue import QueueIntake

        return QueueIntake(self)
