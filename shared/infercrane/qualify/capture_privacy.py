"""Capture privacy: canary strings sent through every ingest path must never be found in any
storage place (every table item, bucket object, queue message incl. DLQs, the stack's log output)
nor in any HTTP response, while the paths themselves demonstrably work (so a silent path cannot
pass by storing nothing)."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from infercrane.http.body import PROTOBUF_MEDIA_TYPE
from infercrane.qualify.common import missing_routes, queue_url, stored_observations
from infercrane.qualify.core import PromiseResult
from infercrane.qualify.target import MotoStorage, StorageReader, Target, find_leaks

PROMISE = "capture privacy"
RESPONSES = "http:responses"
PATHS = ("rest", "otlp-json", "otlp-protobuf", "sqs-signed", "hostile", "bodies")
# What each path carries. Identities must be HMAC'd; bodies and content attributes refused/dropped.
KINDS: dict[str, tuple[str, ...]] = {
    "rest": ("session_id", "parent_session_id", "shared_prefix_id", "prefix_block_id",
             "body_prompt", "body_messages", "invalid_value"),
    "otlp-json": ("conversation_id", "content_prompt", "content_messages", "event_content",
                  "unlisted_attribute"),
    "otlp-protobuf": ("conversation_id", "content_prompt", "content_messages", "event_content",
                      "unlisted_attribute"),
    "sqs-signed": ("edge_session_id", "body_prompt", "unsigned_session_id", "badly_signed_session_id"),
    # Canaries in every free string slot of the closed schemas, in keys and values, nested, raw
    # and base64, and in bodies that fail before any schema (too deep, not UTF-8, not JSON).
    "hostile": ("timing_model_value", "timing_model_key", "provenance_base64", "nested_key",
                "evidence_prompt", "evidence_key", "evidence_note",
                "too_deep", "not_utf8", "not_json", "lifecycle_key"),
    # Body-like keys in every other request body (cache evidence, import options, prefetch
    # resources, the batch envelope), a repeated key, and a sentence in a revision URL.
    "bodies": ("cache_evidence_prompt", "cache_evidence_messages", "import_options_messages",
               "resource_output", "resource_key_prompt", "envelope_prompt", "duplicate_key",
               "revision_url"),
}
BASE_NS = 1_764_000_000_000_000_000  # 2025-11-24T16:00:00Z: a fixed arrival, inside sane bounds


def make_canaries(token: str | None = None) -> dict[str, dict[str, str]]:
    token = token or secrets.token_hex(6)
    return {path: {kind: f"QCANARY{token}{path.replace('-', '')}{kind.replace('_', '')}X"
                   for kind in kinds} for path, kinds in KINDS.items()}


# -- the ingest paths ---------------------------------------------------------------------------
def send_rest(target: Target, tenant: str, deployment: str, c: Mapping[str, str],
              result: PromiseResult, responses: list[str]) -> None:
    base = {"deployment": deployment, "arrival": "2025-11-24T16:00:00.000Z", "input_tokens": 812,
            "output_tokens": 96, "latency_ms": 1840.5}
    items = [
        {**base, "observation_id": "qual-rest-1", "session_id": c["session_id"],
         "parent_session_id": c["parent_session_id"], "shared_prefix_id": c["shared_prefix_id"],
         "prefix_block_ids": [c["prefix_block_id"], 7], "prefix_block_size": 512},
        {**base, "observation_id": "qual-rest-2", "prompt": c["body_prompt"]},
        {**base, "observation_id": "qual-rest-3",
         "messages": [{"role": "user", "content": c["body_messages"]}]},
        {**base, "observation_id": "qual-rest-4", "revision": c["invalid_value"] + " not a name"},
    ]
    reply = target.request("POST", "/v1/observations", tenant=tenant, body={"items": items})
    responses.append(reply.text)
    doc = reply.doc if isinstance(reply.doc, dict) else {}
    result.check("rest: batch answered 200", reply.status == 200, f"HTTP {reply.status}")
    result.check("rest: identity item accepted, three refused",
                 doc.get("accepted") == 1 and doc.get("rejected") == 3, reply.text[:300])
    fields: dict[Any, Any] = {}
    for e in doc.get("errors", []):
        if isinstance(e, dict):
            fields.setdefault(e.get("index"), e.get("field"))  # the first, shallowest body key
    result.check("rest: body field refused naming the field",
                 str(fields.get(1) or "").startswith("prompt")
                 and str(fields.get(2) or "").startswith("messages"), json.dumps(fields))


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def send_hostile(target: Target, tenant: str, deployment: str, c: Mapping[str, str],
                 result: PromiseResult, responses: list[str]) -> None:
    """Canaries where a closed schema leaves no room for them: every request must be refused (or
    its item rejected) and nothing of it stored, whichever way it fails."""
    base = {"deployment": deployment, "arrival": "2025-11-24T16:00:00.000Z", "input_tokens": 8,
            "output_tokens": 4, "latency_ms": 40.0}
    model = {"name": "linear-v1", "overhead_ms": 50.0, "prefill_ms_per_token": 0.1,
             "decode_ms_per_token": 20.0}
    items = [
        {**base, "timing_source": "modeled", "timing_model": {**model, "name": c["timing_model_value"]}},
        {**base, "timing_source": "modeled", "timing_model": {**model, c["timing_model_key"]: 1}},
        {**base, "source": "imported", "provenance": "jsonl:sha256:" + _b64(c["provenance_base64"])},
        {**base, "timing_source": "modeled",
         "timing_model": {**model, "x": [{"deep": {c["nested_key"]: _b64(c["nested_key"])}}]}},
    ]
    reply = target.request("POST", "/v1/observations", tenant=tenant, body={"items": items})
    responses.append(reply.text)
    doc = reply.doc if isinstance(reply.doc, dict) else {}
    result.check("hostile: closed-schema observations all rejected",
                 reply.status == 200 and doc.get("rejected") == len(items), reply.text[:300])
    evidence = [
        {"schema": "infercrane.replay.execution/v1", "measured": {"a": [{"prompt": c["evidence_prompt"]}]}},
        {"schema": "infercrane.replay.execution/v1", "build": {c["evidence_key"]: _b64(c["evidence_key"])}},
        {"schema": "infercrane.replay.execution/v1", "note": c["evidence_note"] * 2000},
    ]
    for body in evidence:
        reply = target.request("POST", "/v1/executions", tenant=tenant, body=body)
        responses.append(reply.text)
        result.check("hostile: open evidence refused with a 4xx", 400 <= reply.status < 500,
                     f"HTTP {reply.status}")
    reply = target.request("POST", "/v1/lifecycle-attempts", tenant=tenant,
                           body={"items": [], c["lifecycle_key"]: c["lifecycle_key"]})
    responses.append(reply.text)
    result.check("hostile: unknown lifecycle key refused", reply.status == 422,
                 f"HTTP {reply.status}")
    failing = {
        "too deep": ('{"items": [' + "[" * 40 + json.dumps(c["too_deep"]) + "]" * 40 + "]}").encode(),
        "not UTF-8": b'{"items": [{"prompt": "\xff' + c["not_utf8"].encode() + b'\xfe"}]}',
        "not JSON": b'{"items": [{"prompt": "' + c["not_json"].encode() + b'"',
    }
    for label, raw in failing.items():
        for path in ("/v1/observations", "/v1/otlp/v1/traces", "/v1/executions"):
            reply = target.request("POST", path, tenant=tenant, raw=raw)
            responses.append(reply.text)
            result.check(f"hostile: {label} body on {path} is a 400", reply.status == 400,
                         f"HTTP {reply.status}")


def send_bodies(target: Target, tenant: str, deployment: str, c: Mapping[str, str],
                result: PromiseResult, responses: list[str]) -> None:
    """Every body that is not an observation batch is checked for body-like keys too (any depth)
    and the envelopes are closed: each request is refused with a 4xx and nothing of it stored."""
    model = "sha256:" + "0" * 64
    cache = {"model": model, "adapter": "aws", "location": "us-east-1a", "state": "present",
             "observed_at": "2025-11-24T16:00:00Z"}
    imported = {"deployment": deployment, "import_id": "imp-" + "0" * 24, "file_sha256": "0" * 64,
                "format": "jsonl", "records": 1}
    resource = "/v1/prefetch-requests/pf_" + "0" * 32 + "_1/resources/"
    sends: list[tuple[str, str, str, Any]] = [
        ("cache evidence", "POST", "/v1/cache-observations",
         {**cache, "evidence": {"prompt": c["cache_evidence_prompt"]}}),
        ("nested cache evidence", "POST", "/v1/cache-observations",
         {**cache, "evidence": {"Messages": c["cache_evidence_messages"]}}),
        ("import options", "POST", "/v1/imports",
         {**imported, "options": {"timing_model": {"messages": [c["import_options_messages"]]}}}),
        ("prefetch resource", "PUT", resource + "volume",
         {"value": "vol-1", "output": c["resource_output"]}),
        ("resource under a body key", "PUT", resource + "prompt",
         {"value": c["resource_key_prompt"]}),
        ("batch envelope", "POST", "/v1/observations",
         {"items": [], "prompt": c["envelope_prompt"]}),
        ("revision URL", "PUT", f"/v1/deployments/{deployment}/revisions/r1",
         {"url": f"http://qual.test/{c['revision_url']} was the prompt"}),
    ]
    for label, method, path, body in sends:
        reply = target.request(method, path, tenant=tenant, body=body)
        responses.append(reply.text)
        result.check(f"bodies: {label} refused with a 422", reply.status == 422,
                     f"HTTP {reply.status}")
    # The last value of a repeated key would win; the request is refused instead.
    twice = (f'{{"deployment": "{deployment}", "window": "24h", '
             f'"window": "{c["duplicate_key"]}"}}').encode()
    reply = target.request("POST", "/v1/traces", tenant=tenant, raw=twice)
    responses.append(reply.text)
    result.check("bodies: a repeated key is a 400", reply.status == 400, f"HTTP {reply.status}")


def otlp_document(deployment: str, span_hex: str, c: Mapping[str, str] | None) -> dict[str, Any]:
    """An OTLP/HTTP JSON export with one GenAI chat span (hex ids, as OTLP JSON writes them)."""
    def s(key: str, value: str) -> dict[str, Any]:
        return {"key": key, "value": {"stringValue": value}}

    attrs: list[dict[str, Any]] = [
        s("gen_ai.operation.name", "chat"), s("gen_ai.request.model", "qual-model"),
        {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "812"}},
        {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "96"}}]
    events: list[dict[str, Any]] = []
    if c is not None:
        attrs += [s("gen_ai.conversation.id", c["conversation_id"]),
                  s("gen_ai.prompt", c["content_prompt"]),
                  s("gen_ai.input.messages",
                    json.dumps([{"role": "user", "content": c["content_messages"]}])),
                  s("enduser.id", c["unlisted_attribute"])]
        events = [{"timeUnixNano": str(BASE_NS + 1000), "name": "gen_ai.user.message",
                   "attributes": [s("content", c["event_content"])]}]
    span = {"traceId": span_hex * 2, "spanId": span_hex, "name": "chat qual-model", "kind": 3,
            "startTimeUnixNano": str(BASE_NS), "endTimeUnixNano": str(BASE_NS + 1_840_500_000),
            "attributes": attrs, "events": events, "status": {"code": 1}}
    return {"resourceSpans": [{"resource": {"attributes": [s("service.name", deployment)]},
                               "scopeSpans": [{"scope": {"name": "qualify"}, "spans": [span]}]}]}


def otlp_protobuf(document: Mapping[str, Any]) -> bytes:
    """The same export as OTLP protobuf (ids are bytes there, so hex becomes base64 for ParseDict)."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    doc = json.loads(json.dumps(document))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for k in ("traceId", "spanId"):
                    span[k] = base64.b64encode(bytes.fromhex(span[k])).decode()
    return bytes(ParseDict(doc, ExportTraceServiceRequest()).SerializeToString())


def send_otlp(target: Target, tenant: str, deployment: str, span_hex: str, c: Mapping[str, str],
              protobuf: bool, result: PromiseResult, responses: list[str]) -> None:
    path = "otlp-protobuf" if protobuf else "otlp-json"
    doc = otlp_document(deployment, span_hex, c)
    if protobuf:
        reply = target.request("POST", "/v1/otlp/v1/traces", tenant=tenant, raw=otlp_protobuf(doc),
                               content_type=PROTOBUF_MEDIA_TYPE)
    else:
        reply = target.request("POST", "/v1/otlp/v1/traces", tenant=tenant, body=doc)
    responses.append(reply.text if not protobuf else reply.text + repr(reply.headers))
    result.check(f"{path}: export answered 200", reply.status == 200, f"HTTP {reply.status}")


def send_sqs(target: Target, tenant: str, deployments: Mapping[str, str], c: Mapping[str, str],
             result: PromiseResult) -> None:
    """Through the gateway's edge helper: HMAC at the edge, sign, send; plus a signed message that
    carries a body, an unsigned one and a badly signed one (all must be dropped, none DLQ'd)."""
    from infercrane.edge import EdgeSigner

    sm = target.aws("secretsmanager")
    names = [s["Name"] for s in sm.list_secrets().get("SecretList", [])
             if s["Name"].endswith(f"/tenants/{tenant}")]
    if not names:
        result.check("sqs-signed: tenant keyring readable by the edge", False, "no keyring secret")
        return
    signer = EdgeSigner.from_secret(sm.get_secret_value(SecretId=names[0])["SecretString"])
    url = queue_url(target, "CaptureQueue")
    sqs = target.aws("sqs")
    base = {"arrival": "2025-11-24T16:00:00.000Z", "input_tokens": 812, "output_tokens": 96,
            "latency_ms": 1840.5}
    good = signer.observation(deployment=deployments["ok"], observation_id="qual-sqs-1",
                              session_id=c["edge_session_id"], **base)
    sqs.send_message(QueueUrl=url, **signer.message([good]))
    body = {**signer.observation(deployment=deployments["body"], observation_id="qual-sqs-2", **base),
            "prompt": c["body_prompt"]}
    sqs.send_message(QueueUrl=url, **signer.message([body]))
    raw = {"deployment": deployments["unsigned"], "observation_id": "qual-sqs-3",
           "session_id": c["unsigned_session_id"], **base}
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"items": [raw]}))
    forged = signer.message([{**raw, "deployment": deployments["forged"],
                              "session_id": c["badly_signed_session_id"]}])
    attrs = forged["MessageAttributes"]
    for name, value in attrs.items():
        if "sig" in name.lower():
            value["StringValue"] = "0" * len(value["StringValue"])
    sqs.send_message(QueueUrl=url, MessageBody=forged["MessageBody"], MessageAttributes=attrs)
    result.check("sqs-signed: four messages sent (edge-signed, body, unsigned, forged)", True)


# -- the scan -----------------------------------------------------------------------------------
def scan_for_canaries(texts: Mapping[str, Sequence[str]], places: Sequence[str],
                      canaries: Mapping[str, Mapping[str, str]], result: PromiseResult) -> None:
    """One check per canary x place. A place that could not be read fails every check in it."""
    for path, kinds in canaries.items():
        for kind, value in kinds.items():
            for place in places:
                if place not in texts:
                    result.check(f"{path} x {kind} x {place}", False, "place not readable")
                    continue
                leaks = find_leaks(texts[place], value)
                result.check(f"{path} x {kind} x {place}", leaks == 0,
                             f"found in {leaks} entries" if leaks else "")


def check_scanner_sees(texts: Mapping[str, Sequence[str]], control: str,
                       result: PromiseResult) -> None:
    """The scan is not vacuous: a value that is meant to be stored (a deployment name) is found."""
    found = find_leaks(texts.get("dynamodb:ObservationsTable", []), control)
    result.check("control: the scanner finds a stored deployment name", found > 0, f"found {found}")


def check_stored(target: Target, tenant: str, expected: Mapping[str, int], result: PromiseResult,
                 ) -> None:
    for deployment, count in expected.items():
        items = stored_observations(target, tenant, deployment)
        label = deployment.split("-", 2)[-1]  # without the per-run prefix: names are digested
        result.check(f"stored observations of {label} = {count}", len(items) == count,
                     f"found {len(items)}")


# RFC 4231 HMAC-SHA256 test cases 1 and 2 (key, data, MAC): the reference, not the code under test.
HMAC_VECTORS: tuple[tuple[bytes, bytes, str], ...] = (
    (b"\x0b" * 20, b"Hi There",
     "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
    (b"Jefe", b"what do ya want for nothing?",
     "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
)


def check_hmac_vectors(pseudonymize: Callable[[str, Any, str | None], str],
                       result: PromiseResult) -> None:
    """Pseudonyms are HMAC-SHA256 exactly: the service's function against RFC 4231's vectors."""
    from infercrane.domain.tenancy import KeySet

    for i, (key, data, mac) in enumerate(HMAC_VECTORS, start=1):
        got = pseudonymize(data.decode(), KeySet(current="v1", keys={"v1": key}), None)
        result.check(f"identity HMAC: RFC 4231 case {i}", got == f"v1:{mac}", got)


def run(target: Target, storage: StorageReader | None = None,
        canaries: Mapping[str, Mapping[str, str]] | None = None) -> PromiseResult:
    result = PromiseResult(PROMISE)
    storage = storage or MotoStorage(target)
    canaries = canaries or make_canaries()
    tenant = "demo"
    run_id = secrets.token_hex(3)
    dep = {name: f"qualcap-{run_id}-{name}" for name in
           ("rest", "otlpjson", "otlpproto", "same", "sqsok", "sqsbody", "sqsunsigned", "sqsforged",
            "hostile", "bodies")}
    missing = missing_routes(target, [("POST", "/v1/observations"), ("POST", "/v1/otlp/v1/traces")])
    responses: list[str] = []
    active = dict(canaries)
    from infercrane.domain.identity import pseudonymize

    check_hmac_vectors(pseudonymize, result)
    if "POST /v1/observations" not in missing:
        send_rest(target, tenant, dep["rest"], canaries["rest"], result, responses)
    else:
        active.pop("rest", None)
    if "POST /v1/otlp/v1/traces" not in missing:
        send_otlp(target, tenant, dep["otlpjson"], "a1" * 8, canaries["otlp-json"], False, result,
                  responses)
        send_otlp(target, tenant, dep["otlpproto"], "b2" * 8, canaries["otlp-protobuf"], True,
                  result, responses)
        # The same span through JSON and protobuf is one observation, not two.
        same = otlp_document(dep["same"], "c3" * 8, None)
        r1 = target.request("POST", "/v1/otlp/v1/traces", tenant=tenant, body=same)
        r2 = target.request("POST", "/v1/otlp/v1/traces", tenant=tenant, raw=otlp_protobuf(same),
                            content_type=PROTOBUF_MEDIA_TYPE)
        result.check("otlp: the same span via JSON and protobuf answered 200",
                     r1.status == r2.status == 200, f"HTTP {r1.status}/{r2.status}")
    else:
        active.pop("otlp-json", None)
        active.pop("otlp-protobuf", None)
    send_hostile(target, tenant, dep["hostile"], canaries["hostile"], result, responses)
    send_bodies(target, tenant, dep["bodies"], canaries["bodies"], result, responses)
    try:
        from infercrane import edge  # noqa: F401

        send_sqs(target, tenant, {"ok": dep["sqsok"], "body": dep["sqsbody"],
                                  "unsigned": dep["sqsunsigned"], "forged": dep["sqsforged"]},
                 canaries["sqs-signed"], result)
    except ImportError:
        missing.append("infercrane.edge (signed SQS capture)")
        active.pop("sqs-signed", None)
    settled = target.settle()
    result.check("every queue drained after ingest", settled)
    expected = {}
    if "rest" in active:
        expected[dep["rest"]] = 1
    if "otlp-json" in active:
        expected.update({dep["otlpjson"]: 1, dep["otlpproto"]: 1, dep["same"]: 1})
    expected[dep["hostile"]] = 0
    expected[dep["bodies"]] = 0
    if "sqs-signed" in active:
        expected.update({dep["sqsok"]: 1, dep["sqsbody"]: 0, dep["sqsunsigned"]: 0,
                         dep["sqsforged"]: 0})
    check_stored(target, tenant, expected, result)
    places = [*storage.places(), RESPONSES]
    texts = dict(storage.read())
    texts[RESPONSES] = responses
    if expected:
        check_scanner_sees(texts, next(d for d, n in expected.items() if n), result)
    scan_for_canaries(texts, places, active, result)
    n_canaries = sum(len(v) for v in active.values())
    result.tried = (f"{n_canaries} canaries x {len(active)} ingest paths ({', '.join(active)}) x "
                    f"{len(places)} storage places (tables, bucket, queues+DLQs, stack log, "
                    "HTTP responses)")
    result.facts = {"paths": sorted(active), "places": places, "canaries_per_path":
                    {p: len(k) for p, k in sorted(active.items())}}
    if missing:
        result.not_available(", ".join(missing))
    return result
