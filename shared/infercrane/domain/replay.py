"""The trace service: build a trace from a window of persisted observations, store it, read it.

Building reads the window's observations (the store's query) and writes the document and its
header. It sends no workload and creates no infrastructure.
"""

from __future__ import annotations

import json
import re
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, NoReturn

from infercrane import __version__
from infercrane.clock import rfc3339
from infercrane.domain.aiperf_export import mooncake_jsonl
from infercrane.domain.attestation import SIGNING_SCHEME, export_statement, trace_statement
from infercrane.domain.collector import collector_paused
from infercrane.domain.digest import normalize_digest_prefix, verify_digest
from infercrane.domain.observation import StoredObservation
from infercrane.domain.trace import EncodedTrace, trace_header
from infercrane.domain.trace_comparisons import TraceComparisons
from infercrane.domain.trace_select import DEFAULT_METHOD, check_method
from infercrane.domain.trace_window import (
    Reader,
    id_conflicts,
    in_memory_trace,
    read_window,
    stream_window,
)
from infercrane.domain.validation import DIGEST_LENGTH, NAME_RE
from infercrane.domain.windows import MAX_REQUESTS_LIMIT, Window, resolve_window
from infercrane.errors import Conflict, InvalidInput, NotFound, VerificationFailed
from infercrane.ports.observations import ObservationStore
from infercrane.ports.signing import EvidenceSigner
from infercrane.ports.traces import DocumentStore, HeaderPage, TraceBuildStore, TraceStore
from infercrane.ports.transport import MessageTransport

FULL_DIGEST_LENGTH = DIGEST_LENGTH
# A window holding more observations than this is built asynchronously: reading and encoding
# 10,000 observations takes a few seconds on DynamoDB, well inside API Gateway's 29 s.
SYNC_BUILD_LIMIT = 10_000
_BUILD_ID = re.compile(r"^[0-9a-f]{32}$")
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")


def document_key(tenant: str, digest: str) -> str:
    return f"traces/{tenant}/{digest}.json"


def attestation_key(tenant: str, digest: str) -> str:
    """The DSSE envelope of the trace's signed statement, beside the document."""
    return f"traces/{tenant}/{digest}.intoto.json"


def check_deployment(deployment: str) -> str:
    if not isinstance(deployment, str) or not NAME_RE.match(deployment):
        raise InvalidInput("A deployment name is 1-128 letters, digits, '.', '_' or '-'.",
                           field="deployment")
    return deployment


@dataclass(frozen=True)
class BuildOutcome:
    """What POST /v1/traces answers: a trace header (built now), or an accepted build."""

    header: dict[str, Any] | None = None
    created: bool = False
    build: dict[str, Any] | None = None


class _Finished(Exception):
    """The build record was finished meanwhile (a concurrent delivery of its message)."""


def _public_build(build: dict[str, Any]) -> dict[str, Any]:
    keys = ("build_id", "status", "deployment", "window", "max_requests", "select", "records_read",
            "requested_at", "updated_at", "digest", "error")
    public = {k: build[k] for k in keys if k in build}
    public["status_path"] = f"/v1/trace-builds/{build['build_id']}"
    return public


@dataclass(frozen=True)
class DocumentAccess:
    """Either the document's bytes (small enough to return) or a URL to fetch it from storage."""

    body: bytes | None = None
    url: str | None = None


class TraceService(TraceComparisons):
    def __init__(self, observations: ObservationStore, traces: TraceStore,
                 documents: DocumentStore, *,
                 software: str = f"infercrane {__version__}",
                 signer: Callable[[], EvidenceSigner] | None = None,
                 builds: TraceBuildStore | None = None,
                 build_queue: MessageTransport | None = None,
                 sync_limit: int = SYNC_BUILD_LIMIT,
                 spool: Callable[[], IO[bytes]] = tempfile.TemporaryFile):
        """Without `builds` and `build_queue` every build is synchronous."""
        self._observations = observations
        self._traces = traces
        self._documents = documents
        self._software = software
        self._builds = builds
        self._build_queue = build_queue
        self._sync_limit = sync_limit
        self._spool = spool
        self._signer = signer

    def _sign(self) -> EvidenceSigner:
        if self._signer is None:
            raise RuntimeError("this trace service has no signing key")
        return self._signer()

    def attest(self, tenant: str, statement: dict[str, Any], digest: str) -> None:
        """Sign the trace's statement and store the envelope beside it (before the header, so
        a listed trace is always signed)."""
        envelope = self._sign().sign(statement)
        self._documents.put_bytes(attestation_key(tenant, digest),
                                  json.dumps(envelope, separators=(",", ":")).encode("utf-8"))

    def attestation(self, tenant: str, digest: str) -> dict[str, Any]:
        header = self.header(tenant, digest)
        envelope: dict[str, Any] = json.loads(
            self._documents.get_bytes(attestation_key(tenant, header["digest"])))
        return envelope

    def export_attestation(self, tenant: str, digest: str,
                           file_name: str | None = None) -> dict[str, Any]:
        """A signed statement about the AIPerf export of a stored trace: the service derives the
        JSONL from its own copy of the document (the same exporter the CLI runs), so it signs
        only bytes it produced itself. `file_name` only names the subject (default
        `aiperf-export.jsonl`); the digest is what binds it."""
        header = self.header(tenant, digest)  # another tenant's trace: 404 before anything else
        file_name = "aiperf-export.jsonl" if file_name is None else file_name
        if not isinstance(file_name, str) or not _FILE_NAME.match(file_name):
            raise InvalidInput("A file name is 1-255 letters, digits, '.', '_' or '-'.",
                               field="name")
        document = json.loads(self._documents.get_bytes(document_key(tenant, header["digest"])))
        body = mooncake_jsonl(document).encode("utf-8")
        return self._sign().sign(export_statement(file_name, body, document))

    def signing_key(self) -> dict[str, str]:
        signer = self._sign()
        return {"public_key_pem": signer.public_key_pem(), "key_id": signer.key_id(),
                "scheme": SIGNING_SCHEME}

    def _check(self, deployment: str, window: str, until: datetime | None, max_requests: int,
               now: datetime, select: str) -> Window:
        check_deployment(deployment)
        check_method(select)
        if not isinstance(max_requests, int) or not 1 <= max_requests <= MAX_REQUESTS_LIMIT:
            raise InvalidInput(f"max_requests must be between 1 and {MAX_REQUESTS_LIMIT}.",
                               field="max_requests")
        return resolve_window(window, until, now)

    def _read(self, tenant: str, deployment: str, bounds: Window) -> Reader:
        def read(start_ms: int, limit: int | None,
                 decided: Mapping[str, str] | None = None) -> Iterator[StoredObservation]:
            return self._observations.query(tenant, deployment, start_ms, bounds.end_ms, limit,
                                            decided)
        return read

    def build_document(self, tenant: str, deployment: str, window: str, until: datetime | None,
                       max_requests: int, now: datetime, request_id: str | None = None,
                       select: str = DEFAULT_METHOD) -> dict[str, Any]:
        """The trace of a window read whole into memory: a service without asynchronous builds
        (tests, qualification) builds every window so."""
        return self._build_in_memory(tenant, deployment, window, until, max_requests, now,
                                     request_id, select).document

    def _build_in_memory(self, tenant: str, deployment: str, window: str, until: datetime | None,
                         max_requests: int, now: datetime, request_id: str | None,
                         select: str) -> EncodedTrace:
        bounds = self._check(deployment, window, until, max_requests, now, select)
        with collector_paused():  # the window's objects all live until the document is built
            read = self._read(tenant, deployment, bounds)(bounds.start_ms, None)
            found, encoder = read_window(read, bounds, max_requests)
            if not found:
                self.refuse_empty(tenant, deployment)
            return in_memory_trace(found, deployment=deployment, window=bounds,
                                   max_requests=max_requests, select=select, built_at=now,
                                   request_id=request_id, software=self._software,
                                   conflicts=id_conflicts(read), encoder=encoder)

    def refuse_empty(self, tenant: str, deployment: str) -> NoReturn:
        """The one refusal of a window without observations, on every build path (synchronous,
        probed, streamed). An empty trace would be labelled `observed` and claim, signed, that
        the deployment received nothing, when all we know is that nothing was captured; a
        misspelled deployment looks exactly like that. The message tells the two cases apart."""
        if self.known_deployment(tenant, deployment):
            raise NotFound("This deployment has no observations in this window (it has some "
                           "outside it: widen the window or move its end).", field="window")
        raise NotFound("This deployment has no observations at all.", field="deployment")

    def known_deployment(self, tenant: str, deployment: str) -> bool:
        """Whether any observation of the deployment is retained: the store's index only (a
        refusal fetches no row)."""
        return self._observations.retained(tenant, deployment)

    def build(self, tenant: str, deployment: str, window: str, until: datetime | None,
              max_requests: int, now: datetime, request_id: str | None = None,
              select: str = DEFAULT_METHOD) -> tuple[dict[str, Any], bool]:
        """(header, created). The same evidence built again returns the first header unchanged."""
        return self._keep(tenant, self._build_in_memory(tenant, deployment, window, until,
                                                        max_requests, now, request_id, select))

    def _keep(self, tenant: str, built: EncodedTrace) -> tuple[dict[str, Any], bool]:
        document = built.document
        existing = self._traces.get_header(tenant, document["digest"])
        if existing is not None:
            return existing, False
        # Stored in its canonical form, as a streamed build stores it: the records' bytes are
        # those the digest was computed over, so the document is serialized once.
        chunks = built.chunks()
        header = trace_header(document, size_bytes=sum(map(len, chunks)))
        return self._store(tenant, header, trace_statement(document, built.blocks()), chunks)

    def _store(self, tenant: str, header: dict[str, Any], statement: dict[str, Any],
               chunks: Iterable[bytes]) -> tuple[dict[str, Any], bool]:
        """The one place a trace document and its header are stored (sync and async builds)."""
        digest = str(header["digest"])
        # Document first: a header never points at a document that is not there.
        self._documents.put_stream(document_key(tenant, digest), chunks)
        self.attest(tenant, statement, digest)
        if not self._traces.put_header(tenant, header):
            # Built concurrently by another request: the stored header wins.
            return self.header(tenant, digest), False
        return header, True

    # -- asynchronous builds (docs/trace.md) ----------------------------------------------------
    def request_build(self, tenant: str, deployment: str, window: str, until: datetime | None,
                      max_requests: int, now: datetime, request_id: str | None = None,
                      select: str = DEFAULT_METHOD) -> BuildOutcome:
        """Build now when the window holds at most `sync_limit` observations; else record a
        build, queue it, and answer with the build to poll. A window of more than
        `max_requests` is read whole either way: choosing its slice needs all of it."""
        bounds = self._check(deployment, window, until, max_requests, now, select)
        if self._builds is None or self._build_queue is None:
            header, created = self.build(tenant, deployment, window, until, max_requests, now,
                                         request_id, select)
            return BuildOutcome(header=header, created=created)
        # A bounded probe: if the window holds no more than the limit, this is the whole read,
        # encoded as it comes. A window past the limit has encoded up to `sync_limit` records
        # for nothing before it is queued (~35 ms of CPU for 10,000, in a 202 answer).
        probe = self._read(tenant, deployment, bounds)(bounds.start_ms, self._sync_limit + 1)
        found, encoder = read_window(probe, bounds, min(max_requests, self._sync_limit))
        if not found:  # refused before anything is recorded or queued
            self.refuse_empty(tenant, deployment)
        if len(found) <= self._sync_limit:
            built = in_memory_trace(found, deployment=deployment, window=bounds,
                                    max_requests=max_requests, select=select, built_at=now,
                                    request_id=request_id, software=self._software,
                                    conflicts=id_conflicts(probe), encoder=encoder)
            header, created = self._keep(tenant, built)
            return BuildOutcome(header=header, created=created)
        stamp = rfc3339(now)
        build = {"build_id": uuid.uuid4().hex, "status": "queued", "deployment": deployment,
                 "window": window, "start_ms": bounds.start_ms, "end_ms": bounds.end_ms,
                 "max_requests": max_requests, "select": select, "records_read": 0,
                 "requested_at": stamp, "updated_at": stamp, "request_id": request_id}
        self._builds.put_build(tenant, build)
        self._build_queue.send({"tenant": tenant, "build_id": build["build_id"]})
        return BuildOutcome(build=_public_build(build))

    def _build_record(self, tenant: str, build_id: str) -> dict[str, Any]:
        if self._builds is None or not isinstance(build_id, str) or not _BUILD_ID.match(build_id):
            raise NotFound("No such trace build.", field="build_id")
        build = self._builds.get_build(tenant, build_id)
        if build is None:
            raise NotFound("No such trace build.", field="build_id")
        return build

    def build_status(self, tenant: str, build_id: str) -> dict[str, Any]:
        build = self._build_record(tenant, build_id)
        public = _public_build(build)
        if build["status"] == "succeeded":
            public["trace"] = self.header(tenant, build["digest"])
        return public

    def run_build(self, tenant: str, build_id: str, now: Callable[[], datetime]) -> dict[str, Any]:
        """Stream the build's window into a stored trace in constant memory (records spooled
        to a temporary file, the document uploaded in parts). Re-delivered, a finished build
        is left as it is."""
        assert self._builds is not None
        build = self._build_record(tenant, build_id)
        if build["status"] in ("succeeded", "failed"):
            return _public_build(build)

        def progress(status: str, **fields: Any) -> None:
            build.update(status=status, updated_at=rfc3339(now()), **fields)
            assert self._builds is not None
            if not self._builds.put_build(tenant, build):
                raise _Finished  # by another delivery of the same message: its record stands

        try:
            progress("running", records_read=0)
            try:
                digest, count = self._stream(tenant, build, now, progress)
            except (InvalidInput, NotFound) as exc:  # the same data fails the same way: no retry
                progress("failed", error={"code": exc.code, "message": exc.message})
                return _public_build(build)
            progress("succeeded", records_read=count, digest=digest)
        except _Finished:
            return _public_build(self._build_record(tenant, build_id))
        return _public_build(build)

    def _stream(self, tenant: str, build: dict[str, Any], now: Callable[[], datetime],
                progress: Callable[..., None]) -> tuple[str, int]:
        bounds = Window(int(build["start_ms"]), int(build["end_ms"]))
        deployment = check_deployment(build["deployment"])
        with self._spool() as spool:
            result = stream_window(
                self._read(tenant, deployment, bounds), spool, deployment=deployment,
                window=bounds, max_requests=int(build["max_requests"]),
                # Builds queued before selection existed kept the earliest.
                select=check_method(build.get("select", "head")),
                progress=lambda read: progress("running", records_read=read),
                built_at=now, request_id=build.get("request_id"), software=self._software)
            if result is None:  # the window emptied (retention) after it was probed
                self.refuse_empty(tenant, deployment)
            if self._traces.get_header(tenant, result.digest) is None:
                self._store(tenant, result.header,
                            trace_statement(result.header, result.blocks), result.chunks())
        return result.digest, int(result.header["sample_count"])

    def header(self, tenant: str, digest: str) -> dict[str, Any]:
        """The header of `digest`, or of the one trace whose digest starts with that prefix."""
        wanted = normalize_digest_prefix(digest)
        if len(wanted) < FULL_DIGEST_LENGTH:
            matches = self._traces.find_by_prefix(tenant, wanted, limit=2)
            if len(matches) > 1:
                raise Conflict("This digest prefix matches more than one trace; give more digits.",
                               field="digest", code="ambiguous_digest")
            wanted = matches[0] if matches else wanted
        found = self._traces.get_header(tenant, wanted) if len(wanted) == FULL_DIGEST_LENGTH else None
        if found is None:
            raise NotFound("No such trace.", field="digest")
        return found

    def document(self, tenant: str, digest: str, inline_limit_bytes: int,
                 url_expires_s: int = 300) -> DocumentAccess:
        header = self.header(tenant, digest)
        key = document_key(tenant, header["digest"])
        if int(header["document"]["size_bytes"]) <= inline_limit_bytes:
            return DocumentAccess(body=self._documents.get_bytes(key))
        return DocumentAccess(url=self._documents.presigned_url(key, url_expires_s))

    def list(self, tenant: str, deployment: str, limit: int = 100,
             next_token: str | None = None) -> HeaderPage:
        check_deployment(deployment)
        if not 1 <= limit <= 1000:
            raise InvalidInput("limit must be between 1 and 1000.", field="limit")
        return self._traces.list_headers(tenant, deployment, limit, next_token)

    def _verified_document(self, tenant: str, digest: str) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(
            self._documents.get_bytes(document_key(tenant, digest)))
        ok, _ = verify_digest(document)
        if not ok or document.get("digest") != digest:
            raise VerificationFailed("A stored trace document does not match its digest.",
                                     field="digest")
        return document
