"""In-memory fakes of the ports, for unit tests (they follow the port contracts, not an SDK)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from infercrane.domain.observation import StoredObservation
from infercrane.errors import InvalidInput, NotFound
from infercrane.ports.observations import ObservationStore, WriteStats
from infercrane.ports.signing import EvidenceSigner
from infercrane.ports.traces import DocumentStore, HeaderPage, TraceBuildStore, TraceStore
from infercrane.ports.transport import MessageTransport


@dataclass
class FakeObservationStore:
    """One sorted partition per (tenant, deployment); `query` reads it lazily, so `items_read`
    counts what a read took, not what the partition holds."""

    items: dict[tuple[str, str], dict[str, StoredObservation]] = field(default_factory=dict)
    items_read: int = 0

    def put_many(self, observations: Sequence[StoredObservation]) -> WriteStats:
        for o in observations:
            self.items.setdefault((o.tenant, o.deployment), {}).setdefault(o.sort_key, o)
        return WriteStats(items=len(observations), requests=1, retries=0)

    def query(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
              limit: int | None = None, decided: Mapping[str, str] | None = None,
              ) -> Iterator[StoredObservation]:
        partition = self.items.get((tenant, deployment), {})  # one id, one content: no conflicts
        matching = [partition[k] for k in sorted(partition)
                    if start_ms <= partition[k].arrival_ms < end_ms]
        for o in matching[:limit]:
            self.items_read += 1
            yield o

    def retained(self, tenant: str, deployment: str) -> bool:
        return bool(self.items.get((tenant, deployment)))

    def delete(self, tenant: str, deployment: str, before_ms: int | None = None) -> int:
        partition = self.items.get((tenant, deployment), {})
        doomed = [k for k, o in partition.items() if before_ms is None or o.arrival_ms < before_ms]
        for k in doomed:
            del partition[k]
        return len(doomed)

    def delete_page(self, tenant: str, deployment: str, before_ms: int | None,
                    ) -> tuple[int, bool]:
        return self.delete(tenant, deployment, before_ms), True


@dataclass
class FakeTraceStore:
    headers: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def put_header(self, tenant: str, header: Mapping[str, Any]) -> bool:
        key = (tenant, str(header["digest"]))
        if key in self.headers:
            return False
        self.headers[key] = json.loads(json.dumps(header))
        return True

    def get_header(self, tenant: str, digest: str) -> dict[str, Any] | None:
        found = self.headers.get((tenant, digest))
        return None if found is None else json.loads(json.dumps(found))

    def list_headers(self, tenant: str, deployment: str, limit: int,
                     next_token: str | None = None) -> HeaderPage:
        rows = sorted(((h["created_at"], h["digest"], h) for (t, _), h in self.headers.items()
                       if t == tenant and h["deployment"] == deployment), reverse=True)
        if next_token:
            try:
                after = tuple(json.loads(base64.b64decode(next_token)))
            except ValueError as exc:
                raise InvalidInput("The next_token is not one this service issued.",
                                   field="next_token") from exc
            rows = [r for r in rows if (r[0], r[1]) < after]
        page = rows[:limit]
        token = (base64.b64encode(json.dumps(page[-1][:2]).encode()).decode()
                 if len(rows) > limit else None)
        return HeaderPage([r[2] for r in page], token)

    def find_by_prefix(self, tenant: str, digest_prefix: str, limit: int) -> list[str]:
        return sorted(d for t, d in self.headers if t == tenant
                      and d.startswith(digest_prefix))[:limit]


@dataclass
class FakeDocumentStore:
    objects: dict[str, bytes] = field(default_factory=dict)

    def put_bytes(self, key: str, body: bytes, content_type: str = "application/json") -> None:
        self.objects[key] = bytes(body)

    def put_stream(self, key: str, chunks: Iterable[bytes],
                   content_type: str = "application/json") -> int:
        self.objects[key] = b"".join(chunks)
        return len(self.objects[key])

    def get_bytes(self, key: str) -> bytes:
        if key not in self.objects:
            raise NotFound("No such document.", field="key")
        return self.objects[key]

    def presigned_url(self, key: str, expires_s: int = 300) -> str:
        return f"https://documents.invalid/{key}?expires={expires_s}"


BASE_MS = 1_763_316_000_000  # 2025-11-16T18:00:00Z


def observation(i: int = 0, **overrides: Any) -> StoredObservation:
    """A plausible stored observation; `i` spreads arrivals 100 ms apart."""
    values: dict[str, Any] = {
        "tenant": "demo", "deployment": "coder", "observation_id": f"obs-{i:06d}",
        "arrival_ms": BASE_MS + 100 * i, "input_tokens": 100 + i, "output_tokens": 10 + i % 7,
        "latency_ms": 250.0 + i % 5, "outcome": "ok", "streaming": True, "sampling_rate": 1.0,
        "source": "captured", "ingested_at_ms": BASE_MS + 100 * i + 1000, "ttft_ms": 40.5,
        "key_version": "v1",
    }
    values.update(overrides)
    return StoredObservation(**values)


def with_changes(obs: StoredObservation, **changes: Any) -> StoredObservation:
    return replace(obs, **changes)


class LocalKeySigner:
    """`EvidenceSigner` with a throwaway in-process ECDSA P-256 key (securesystemslib's
    CryptoSigner): real DSSE signatures, no KMS."""

    def __init__(self) -> None:
        from securesystemslib.signer import CryptoSigner

        self.crypto = CryptoSigner.generate_ecdsa()
        self.signed: list[dict[str, Any]] = []

    def sign(self, statement: Mapping[str, Any]) -> dict[str, Any]:
        from infercrane.adapters.dsse import sign_statement

        self.signed.append(dict(statement))
        return sign_statement(self.crypto, statement)

    def public_key_pem(self) -> str:
        from infercrane.adapters.dsse import pem_of

        return pem_of(self.crypto.public_key)

    def key_id(self) -> str:
        return str(self.crypto.public_key.keyid)


def local_signer() -> Callable[[], EvidenceSigner]:
    """A signer factory as the services take it (one key for the factory's lifetime)."""
    signer = LocalKeySigner()
    return lambda: signer


@dataclass
class FakeTraceBuildStore:
    builds: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    writes: list[dict[str, Any]] = field(default_factory=list)

    def put_build(self, tenant: str, build: Mapping[str, Any]) -> bool:
        stored = self.builds.get((tenant, str(build["build_id"])))
        if stored is not None and stored["status"] in ("succeeded", "failed"):
            return False
        self.builds[(tenant, str(build["build_id"]))] = json.loads(json.dumps(build))
        self.writes.append(dict(build))
        return True

    def get_build(self, tenant: str, build_id: str) -> dict[str, Any] | None:
        found = self.builds.get((tenant, build_id))
        return None if found is None else json.loads(json.dumps(found))


@dataclass
class FakeQueue:
    sent: list[dict[str, Any]] = field(default_factory=list)

    def send(self, body: dict[str, Any]) -> str:
        self.sent.append(body)
        return f"m-{len(self.sent)}"


# Each fake held to the port it stands in for: mypy (`make typecheck`, which checks this module)
# fails on these lines when a port and its fake drift apart (a method added, renamed or retyped
# on either side). The protocols stay structural: a fake inherits nothing that could hide a gap.
if TYPE_CHECKING:
    _traces: TraceStore = FakeTraceStore()
    _documents: DocumentStore = FakeDocumentStore()
    _builds: TraceBuildStore = FakeTraceBuildStore()
    _queue: MessageTransport = FakeQueue()
    _signer: EvidenceSigner = LocalKeySigner()
    _observations: ObservationStore = FakeObservationStore()
