"""The trace service over in-memory ports: storage, tenancy, listing, document access."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
import rfc8785

from infercrane.domain.digest import verify_digest
from infercrane.domain.replay import TraceService, document_key
from infercrane.errors import Conflict, InvalidInput, NotFound
from tests.fakes import (
    BASE_MS,
    FakeDocumentStore,
    FakeObservationStore,
    FakeTraceStore,
    local_signer,
    observation,
)

NOW = datetime.fromtimestamp((BASE_MS + 3_600_000) / 1000, UTC)


@pytest.fixture
def parts():
    store, traces, documents = FakeObservationStore(), FakeTraceStore(), FakeDocumentStore()
    store.put_many([observation(i) for i in range(20)])
    store.put_many([observation(i, tenant="other") for i in range(3)])
    return store, traces, documents, TraceService(store, traces, documents, signer=local_signer())


def test_build_stores_the_document_and_its_header(parts):
    _, _traces, documents, service = parts
    header, created = service.build("demo", "coder", "1h", None, 1000, NOW, request_id="r-1")
    assert created
    body = documents.objects[document_key("demo", header["digest"])]
    document = json.loads(body)
    assert verify_digest(document)[0]
    assert document["digest"] == header["digest"]
    assert header["document"]["size_bytes"] == len(body)
    assert header["sample_count"] == 20
    assert "records" not in header
    assert sum(header["arrival_histogram"]["counts"]) == 20


def test_building_the_same_evidence_again_returns_the_first_header(parts):
    *_, service = parts
    first, _ = service.build("demo", "coder", "1h", None, 1000, NOW)
    again, created = service.build("demo", "coder", "1h", NOW, 1000, NOW + timedelta(minutes=5))
    assert not created
    assert again == first


def test_another_tenants_trace_is_not_found(parts):
    *_, service = parts
    header, _ = service.build("demo", "coder", "1h", None, 1000, NOW)
    with pytest.raises(NotFound):
        service.header("other", header["digest"])
    with pytest.raises(NotFound):
        service.document("other", header["digest"], inline_limit_bytes=10**9)
    assert service.build("other", "coder", "1h", None, 1000, NOW)[0]["sample_count"] == 3


def test_large_documents_are_offered_as_a_url_small_ones_inline(parts):
    _, _, documents, service = parts
    header, _ = service.build("demo", "coder", "1h", None, 1000, NOW)
    inline = service.document("demo", header["digest"], inline_limit_bytes=10**9)
    assert inline.body == documents.objects[document_key("demo", header["digest"])]
    far = service.document("demo", header["digest"], inline_limit_bytes=10)
    assert far.body is None
    assert far.url
    assert document_key("demo", header["digest"]) in far.url


def test_listing_pages_through_every_trace_newest_first(parts):
    *_, service = parts
    built = [service.build("demo", "coder", "1h", NOW - timedelta(minutes=m), 1000,
                           NOW + timedelta(seconds=m))[0]["digest"] for m in range(5)]
    seen, token = [], None
    while True:
        page = service.list("demo", "coder", limit=2, next_token=token)
        seen += [h["digest"] for h in page.headers]
        token = page.next_token
        if token is None:
            break
    assert seen == list(reversed(built))
    assert service.list("other", "coder").headers == []


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_requests": 0}, "max_requests"), ({"max_requests": 100_001}, "max_requests"),
    ({"deployment": "bad name!"}, "deployment"), ({"window": "forever"}, "window"),
])
def test_bad_requests_name_their_field(parts, kwargs, field):
    *_, service = parts
    args = {"deployment": "coder", "window": "1h", "until": None, "max_requests": 10} | kwargs
    with pytest.raises(InvalidInput) as info:
        service.build("demo", now=NOW, **args)
    assert info.value.field == field


def test_building_a_window_within_the_maximum_reads_just_the_window(parts):
    store, _, _, service = parts
    store.items_read = 0
    service.build("demo", "coder", "1h", None, 1000, NOW)
    assert store.items_read == 20


def test_the_probe_reads_one_beyond_the_sync_limit_then_queues():
    from tests.fakes import FakeQueue, FakeTraceBuildStore

    store, queue = FakeObservationStore(), FakeQueue()
    store.put_many([observation(i) for i in range(3000)])
    service = TraceService(store, FakeTraceStore(), FakeDocumentStore(),
                           builds=FakeTraceBuildStore(), build_queue=queue, sync_limit=1000,
                           signer=local_signer())
    outcome = service.request_build("demo", "coder", "24h", None, 100, NOW + timedelta(hours=1))
    assert outcome.build is not None and len(queue.sent) == 1
    assert store.items_read == 1001  # not the 3000 the window holds: the worker reads those


def test_a_deployment_with_no_observations_at_all_is_not_found(parts):
    _, _, documents, service = parts
    with pytest.raises(NotFound) as raised:
        service.build("demo", "never-captured", "1h", None, 1000, NOW)
    assert raised.value.field == "deployment"
    assert documents.objects == {}


def test_an_empty_window_of_a_known_deployment_is_not_found_and_stores_nothing(parts):
    # An empty trace would claim, labelled `observed` and signed, that nothing arrived.
    _, traces, documents, service = parts
    with pytest.raises(NotFound) as raised:
        service.build("demo", "coder", "1h", NOW - timedelta(days=2), 1000, NOW)
    assert raised.value.field == "window"
    assert "outside it" in raised.value.message
    assert documents.objects == {} and traces.headers == {}


def test_a_build_stores_a_signed_statement_naming_the_document(parts):
    from infercrane.adapters.dsse import verify_envelope
    from infercrane.domain.replay import attestation_key

    _, _, documents, service = parts
    header, _ = service.build("demo", "coder", "1h", None, 1000, NOW)
    envelope = json.loads(documents.objects[attestation_key("demo", header["digest"])])
    statement = verify_envelope(envelope, service.signing_key()["public_key_pem"])
    assert statement["subject"][0]["digest"]["sha256"] == header["digest"].removeprefix("sha256:")
    assert service.attestation("demo", header["digest"]) == envelope


def test_a_build_stores_the_reference_canonical_bytes_and_signs_their_blocks(parts):
    """One serialization: the stored document is the canonical form the digest covers (as a
    streamed build stores it), and the signed blocks are those of the document built."""
    from infercrane.adapters.dsse import verify_envelope
    from infercrane.domain.replay import attestation_key

    _, _, documents, service = parts
    header, _ = service.build("demo", "coder", "1h", None, 1000, NOW, request_id="r-1")
    body = documents.objects[document_key("demo", header["digest"])]
    document = service.build_document("demo", "coder", "1h", None, 1000, NOW, request_id="r-1")
    assert body == rfc8785.dumps(document)
    assert header["document"]["size_bytes"] == len(body)
    envelope = json.loads(documents.objects[attestation_key("demo", header["digest"])])
    statement = verify_envelope(envelope, service.signing_key()["public_key_pem"])
    assert statement["predicate"]["blocks"] == {
        name: hashlib.sha256(rfc8785.dumps(value)).hexdigest()
        for name, value in document.items() if name != "digest"}


def test_an_export_attestation_checks_the_tenant_before_the_file_name(parts):
    *_, service = parts
    header, _ = service.build("demo", "coder", "1h", None, 1000, NOW)
    with pytest.raises(NotFound):
        service.export_attestation("other", header["digest"], "../../etc/passwd")
    with pytest.raises(InvalidInput) as bad:
        service.export_attestation("demo", header["digest"], "../../etc/passwd")
    assert bad.value.field == "name"
    envelope = service.export_attestation("demo", header["digest"])
    assert envelope["payloadType"] == "application/vnd.in-toto+json"


def test_a_unique_digest_prefix_finds_its_trace_and_an_ambiguous_one_is_refused(parts):
    from infercrane.errors import Conflict

    _, traces, _, service = parts
    header, _ = service.build("demo", "coder", "1h", None, 1000, NOW)
    digest = header["digest"]
    assert service.header("demo", digest[:13])["digest"] == digest  # sha256: + 6 hex
    assert service.header("demo", digest[7:20].upper())["digest"] == digest
    with pytest.raises(NotFound):
        service.header("other", digest[:13])
    with pytest.raises(InvalidInput):
        service.header("demo", digest[:10])  # under 6 hex digits
    twin = {**header, "digest": digest[:13] + "0" * 58}
    traces.put_header("demo", twin)
    with pytest.raises(Conflict) as ambiguous:
        service.header("demo", digest[:13])
    assert ambiguous.value.code == "ambiguous_digest"
    assert service.header("demo", digest)["digest"] == digest  # a full digest is never ambiguous


def test_compare_resolves_prefixes_stores_one_document_and_refuses_others_traces(parts):
    from infercrane.domain.trace_comparisons import comparison_key
    from infercrane.errors import VerificationFailed

    _, _, documents, service = parts
    first, _ = service.build("demo", "coder", "1h", None, 1000, NOW)
    second, _ = service.build("demo", "coder", "1h", None, 10, NOW)
    doc = service.compare("demo", first["digest"][7:19], second["digest"], 0.01, NOW)
    assert (doc["a"]["digest"], doc["b"]["digest"]) == (first["digest"], second["digest"])
    assert verify_digest(doc)[0]
    assert json.loads(documents.objects[comparison_key("demo", doc["digest"])]) == doc
    assert service.comparison("demo", doc["digest"]) == doc
    with pytest.raises(NotFound):
        service.comparison("other", doc["digest"])
    with pytest.raises(NotFound):
        service.compare("other", first["digest"], second["digest"], 0.01, NOW)
    with pytest.raises(InvalidInput) as short:
        service.compare("demo", "abc", second["digest"], 0.01, NOW)
    assert short.value.field == "a"
    # A stored document changed after it was built is refused, never compared.
    key = document_key("demo", second["digest"])
    documents.objects[key] = documents.objects[key].replace(b'"sample_count":', b'"sample_count":1')
    with pytest.raises(VerificationFailed):
        service.compare("demo", first["digest"], second["digest"], 0.01, NOW)


def test_an_ambiguous_prefix_names_its_field(parts):
    _, traces, _, service = parts
    first, _ = service.build("demo", "coder", "1h", None, 1000, NOW)
    twin = dict(first, digest=first["digest"][:20] + "0" * 51)
    traces.put_header("demo", twin)
    with pytest.raises(Conflict) as err:
        service.compare("demo", first["digest"][:20], first["digest"], 0.01, NOW)
    assert (err.value.field, err.value.code) == ("a", "ambiguous_digest")


def test_a_comparison_is_signed_and_verifies_like_a_trace(parts):
    from infercrane.cli.verify import verify_trace

    _, _, _, service = parts
    first, _ = service.build("demo", "coder", "1h", None, 1000, NOW)
    second, _ = service.build("demo", "coder", "1h", None, 10, NOW)
    doc = service.compare("demo", first["digest"], second["digest"], 0.01, NOW)
    envelope = service.comparison_attestation("demo", doc["digest"])
    pem = service.signing_key()["public_key_pem"]
    rows = verify_trace(doc, envelope, pem)
    assert [(r.check, r.ok) for r in rows] == [("signature", True), ("digest", True),
                                               ("blocks", True)]
    # Its build block is signed too, although the digest leaves it out.
    rebuilt = {**doc, "build": {**doc["build"], "software": "other"}}
    assert [(r.check, r.ok) for r in verify_trace(rebuilt, envelope, pem)][1:] == [
        ("digest", True), ("blocks", False)]
    # A changed verdict with its digest recomputed no longer matches what was signed.
    from infercrane.domain.digest import compute_digest

    forged = {**doc, "verdict": "same shape" if doc["verdict"] != "same shape" else "shifted"}
    forged["digest"] = compute_digest(forged)
    assert [(r.check, r.ok) for r in verify_trace(forged, envelope, pem)][1] == ("digest", False)
    with pytest.raises(NotFound):
        service.comparison_attestation("other", doc["digest"])


class _WatchedStore(FakeObservationStore):
    """Notes whether the cyclic collector was enabled while the window was read."""

    collecting: list[bool]

    def query(self, *args, **kwargs):
        import gc

        self.collecting = [gc.isenabled()]
        return super().query(*args, **kwargs)


def test_an_in_memory_build_pauses_the_collector_and_gives_it_back_even_when_it_fails():
    import gc

    store = _WatchedStore()
    store.put_many([observation(i) for i in range(5)])
    service = TraceService(store, FakeTraceStore(), FakeDocumentStore(), signer=local_signer())
    assert gc.isenabled()
    service.build_document("demo", "coder", "1h", None, 1000, NOW)
    assert store.collecting == [False] and gc.isenabled()
    with pytest.raises(NotFound):  # an empty window: refused inside the paused block
        service.build_document("demo", "coder", "1h", NOW - timedelta(days=2), 1000, NOW)
    assert store.collecting == [False] and gc.isenabled()
    gc.disable()  # a caller that had paused it keeps it paused
    try:
        service.build_document("demo", "coder", "1h", None, 1000, NOW)
        assert not gc.isenabled()
    finally:
        gc.enable()
