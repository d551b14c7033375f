"""Every ingest path against moto, with canaries: REST, OTLP JSON, OTLP protobuf and the queue.

Canary strings travel as prompt bodies, content attributes and raw identities. Afterwards every
table item, bucket object, queue message (DLQs included), response and captured log line is
searched: none may contain a canary. The raw identities must show up only as their HMACs.
"""

from __future__ import annotations

import base64
import gzip
import importlib.util
import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from infercrane.domain.identity import pseudonymize
from infercrane.domain.tenancy import Keyring, KeySet
from infercrane.edge import EdgeSigner
from infercrane.local.gateway import Gateway
from infercrane.local.template import ApiRoute
from infercrane.local.workers import sqs_event
from tests.conftest import REPO, load_event
from tests.support.lambda_context import LambdaContext
from tests.unit.test_capture_otlp import json_export, proto_export

BODY = "CANARY-BODY-4c0ffee"
RAW_ID = "CANARY-RAWID-77d1"
CANARIES = (BODY, RAW_ID, "CANARY-otlp-9d1c-content")
_loaded = 0


def load_handler(name: str) -> Any:
    global _loaded
    _loaded += 1
    spec = importlib.util.spec_from_file_location(f"_capture_test_{name}_{_loaded}",
                                                  REPO / "functions" / name / "app.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.handler


@pytest.fixture
def stack(aws, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "InferCraneTest")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "infercrane")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    for tenant in ("demo", "other"):
        aws.container.tenancy.ensure_tenant(tenant, datetime.now(UTC))
    return aws


def api_call(handler: Any, method: str, path: str, body: bytes | None, tenant: str = "demo",
             content_type: str = "application/json", query: str = "",
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    route_path = "/v1/deployments/{deployment}/observations" if path.startswith("/v1/deployments") \
        else path
    route = ApiRoute("ApiFunction", method, route_path, "default")
    params = route.matches(method, path) or {}
    gateway = Gateway([route], {}, None, "unused")
    hdrs = {"content-type": content_type, **(headers or {})}
    event = gateway.proxy_event(route, params, method, path, query, hdrs, body or b"",
                                {"authorizer": {"tenant": tenant, "key_id": "k1"}})
    result = handler(event, LambdaContext(function_name="ApiFunction"))
    raw = result.get("body") or ""
    payload = base64.b64decode(raw) if result.get("isBase64Encoded") else raw.encode()
    out = {k: str(v) for k, v in (result.get("headers") or {}).items()}
    out.update({k: ", ".join(v) for k, v in (result.get("multiValueHeaders") or {}).items()})
    return result["statusCode"], out, payload


def deliver(stack: Any, handler: Any) -> list[dict[str, Any]]:
    """What Lambda's event source mapping does: receive, invoke, delete what succeeded."""
    sqs = stack.client("sqs")
    url, arn = stack.physical.refs["CaptureQueue"], stack.physical.arns["CaptureQueue"]
    failures: list[dict[str, Any]] = []
    while True:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                  MessageAttributeNames=["All"],
                                  MessageSystemAttributeNames=["All"]).get("Messages", [])
        if not got:
            return failures
        result = handler(sqs_event(got, arn, "us-east-1"), LambdaContext(function_name="Capture"))
        failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
        failures.extend(result["batchItemFailures"])
        for m in got:
            if m["MessageId"] not in failed:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        if failed:
            return failures


GZIP_MAGIC = b"\x1f\x8b"


def everything_stored(stack: Any) -> str:
    """Every item, object and message in the account, as one string to search."""
    parts: list[str] = []
    ddb, s3, sqs = stack.client("dynamodb"), stack.client("s3"), stack.client("sqs")
    for table in ddb.list_tables()["TableNames"]:
        for page in ddb.get_paginator("scan").paginate(TableName=table):
            parts.extend(json.dumps(i) for i in page["Items"])
    for bucket in s3.list_buckets().get("Buckets", []):
        for obj in s3.list_objects_v2(Bucket=bucket["Name"]).get("Contents", []):
            body = s3.get_object(Bucket=bucket["Name"], Key=obj["Key"])["Body"].read()
            # Observation segments are gzip'd: searched compressed, a canary would hide.
            if body[:2] == GZIP_MAGIC:
                body = gzip.decompress(body)
            parts.append(body.decode("utf-8", "replace"))
    for url in sqs.list_queues().get("QueueUrls", []):
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0,
                                     MessageAttributeNames=["All"]).get("Messages", []):
            parts.append(json.dumps(m))
    return "\n".join(parts)


def test_canaries_never_reach_storage_logs_queues_or_responses(stack, capfd, caplog):
    caplog.set_level("INFO")
    api, capture = load_handler("api"), load_handler("capture")
    # The functions share one Powertools logger ("infercrane"): an earlier test may have left it
    # at another level, and its stream bound to that test's stdout. This test scans INFO logs on
    # its own captured stdout.
    caplog.set_level("INFO", logger="infercrane")
    for handler in logging.getLogger("infercrane").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sys.stdout)
    responses: list[bytes] = []

    # REST: a body field, a nested body, an invalid item whose value carries a canary, and a
    # valid item with a raw session id.
    status, _, payload = api_call(api, "POST", "/v1/observations", json.dumps({"items": [
        {"deployment": "coder", "arrival": "2026-11-29T10:00:00Z", "input_tokens": 1,
         "output_tokens": 1, "latency_ms": 5, "prompt": BODY},
        {"deployment": "coder", "arrival": "2026-11-29T10:00:00Z", "input_tokens": 1,
         "output_tokens": 1, "latency_ms": 5, "messages": [{"role": "user", "content": BODY}]},
        {"deployment": BODY + " bad", "arrival": BODY, "input_tokens": BODY,
         "output_tokens": 1, "latency_ms": 5, "session_id": RAW_ID},
        {"observation_id": "rest-1", "deployment": "coder", "arrival": "2026-11-29T10:00:00Z",
         "input_tokens": 10, "output_tokens": 2, "latency_ms": 50, "session_id": RAW_ID},
    ]}).encode())
    assert status == 200
    assert json.loads(payload)["accepted"] == 1
    responses.append(payload)
    status, _, payload = api_call(api, "POST", "/v1/observations", b'{"items": [' + BODY.encode())
    assert status == 400
    assert json.loads(payload)["error"]["code"] == "invalid_json"
    responses.append(payload)

    # OTLP JSON, and OTLP protobuf gzip'd as collectors send it (base64 through API Gateway).
    export = json_export({"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 7,
                          "gen_ai.usage.output_tokens": 3, "gen_ai.conversation.id": RAW_ID,
                          "gen_ai.input.messages": BODY, "gen_ai.prompt.0.content": BODY})
    status, _, payload = api_call(api, "POST", "/v1/otlp/v1/traces", json.dumps(export).encode())
    assert status == 200
    assert json.loads(payload)["dropped_content_attributes"] == 3
    responses.append(payload)
    status, headers, payload = api_call(api, "POST", "/v1/otlp/v1/traces",
                                        gzip.compress(proto_export()),
                                        content_type="application/x-protobuf",
                                        query="deployment=proto-dep",
                                        headers={"content-encoding": "gzip"})
    assert status == 200
    assert headers["Content-Type"] == "application/x-protobuf"
    responses.append(payload)

    # The queue: a good edge-signed message, then messages that must be consumed and dropped.
    sqs, url = stack.client("sqs"), stack.physical.refs["CaptureQueue"]
    signer = EdgeSigner(stack.container.keyrings.get("demo"))
    good = signer.observation(observation_id="q-1", deployment="coder",
                              arrival="2026-11-29T10:00:01Z", input_tokens=3, output_tokens=1,
                              latency_ms=9.5, session_id=RAW_ID)
    sqs.send_message(QueueUrl=url, **signer.message([good]))
    sqs.send_message(QueueUrl=url, **signer.message([{**good, "observation_id": "q-2",
                                                      "prompt": BODY}]))
    sqs.send_message(QueueUrl=url, **signer.message([{**good, "observation_id": "q-3",
                                                      "session_id": RAW_ID}]))
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"prompt": BODY, "session_id": RAW_ID}))
    forged = signer.message([{**good, "text": BODY}])
    forged["MessageAttributes"]["signature"]["StringValue"] = "0" * 64
    sqs.send_message(QueueUrl=url, **forged)
    assert deliver(stack, capture) == []  # nothing is retried, so nothing can reach the DLQ

    stored = everything_stored(stack)
    logs = capfd.readouterr()
    searched = "\n".join([stored, logs.out, logs.err, caplog.text,
                          *(r.decode("utf-8", "replace") for r in responses)])
    for canary in CANARIES:
        assert canary not in searched
    hmac_id = pseudonymize(RAW_ID, stack.container.keyrings.get("demo").identity)
    assert stored.count(hmac_id) == 3  # REST, OTLP JSON and the queue stored it, as an HMAC
    assert "rest-1" in stored
    assert "q-1" in stored
    assert "q-3" not in stored
    assert stored.count('"observation_id":"rest-1"') == 1  # read from inside a segment
    assert '"capture batch"' in logs.out  # the consumer did log, just nothing it must not


def test_otlp_json_and_protobuf_reach_the_same_stored_observation(stack):
    api = load_handler("api")
    export = json_export()
    api_call(api, "POST", "/v1/otlp/v1/traces", json.dumps(export).encode())
    store = stack.container.observations
    (from_json,) = list(store.query("demo", "coder-production", 0, 2**42))
    api_call(api, "DELETE", "/v1/deployments/coder-production/observations", None)
    assert list(store.query("demo", "coder-production", 0, 2**42)) == []
    status, _, _ = api_call(api, "POST", "/v1/otlp/v1/traces", proto_export(),
                            content_type="application/x-protobuf")
    (from_proto,) = list(store.query("demo", "coder-production", 0, 2**42))
    assert status == 200
    assert from_json.observation_id == from_proto.observation_id
    assert from_json == type(from_json)(**{**from_proto.__dict__,
                                           "ingested_at_ms": from_json.ingested_at_ms})


def test_rest_batch_semantics_and_whole_request_problems(stack):
    api = load_handler("api")
    item = {"deployment": "coder", "arrival": "2026-11-29T10:00:00Z", "input_tokens": 1,
            "output_tokens": 1, "latency_ms": 5}
    status, _, payload = api_call(api, "POST", "/v1/observations",
                                  json.dumps({"items": [item] * 501}).encode())
    assert (status, json.loads(payload)["error"]["code"]) == (413, "payload_too_large")
    status, _, payload = api_call(api, "POST", "/v1/observations", json.dumps([item]).encode())
    assert (status, json.loads(payload)["error"]["field"]) == (422, "items")
    status, _, payload = api_call(api, "POST", "/v1/observations", json.dumps(
        {"items": [item, {**item, "output_tokens": -4}]}).encode())
    assert status == 200
    assert json.loads(payload) == {"accepted": 1, "rejected": 1, "stored": 1,
                                   "already_present": 0, "errors": [
        {"index": 1, "field": "output_tokens", "code": "out_of_range",
         "message": "Is below the allowed minimum."}]}


def test_tenants_cannot_delete_each_others_observations(stack):
    api = load_handler("api")
    item = {"observation_id": "x", "deployment": "shared-name", "arrival": "2026-11-29T10:00:00Z",
            "input_tokens": 1, "output_tokens": 1, "latency_ms": 5}
    api_call(api, "POST", "/v1/observations", json.dumps({"items": [item]}).encode())
    status, _, payload = api_call(api, "DELETE", "/v1/deployments/shared-name/observations",
                                  None, tenant="other")
    assert status == 200
    assert json.loads(payload)["deleted"] == 0
    assert len(list(stack.container.observations.query("demo", "shared-name", 0, 2**42))) == 1
    status, _, payload = api_call(api, "DELETE", "/v1/deployments/shared-name/observations",
                                  None, query="before=2026-11-29T10:00:00.001Z")
    assert json.loads(payload) == {"deployment": "shared-name", "deleted": 1,
                                   "before": "2026-11-29T10:00:00.001Z", "finished": True}


def test_the_sam_event_file_is_consumed_with_the_documented_example_keyring(stack):
    # docs/capture.md documents this keyring: events/capture_sqs.json is signed with it.
    stack.container.keyrings.update("demo", lambda _ring: Keyring(
        "demo", KeySet("v1", {"v1": b"example-identity-key-do-not-use!"}),
        KeySet("v1", {"v1": b"example-ingest-key--do-not-use!!"})))
    result = load_handler("capture")(load_event("capture_sqs.json"),
                                     LambdaContext(function_name="Capture"))
    assert result == {"batchItemFailures": []}
    stored = list(stack.container.observations.query("demo", "coder-production", 0, 2**42))
    assert [o.observation_id for o in stored] == ["gw-example-0001", "gw-example-0002"]


def test_capture_reports_only_transient_failures(stack, monkeypatch):
    from infercrane.errors import DependencyUnavailable

    def down(observations):
        raise DependencyUnavailable("The observation store is unavailable.")

    monkeypatch.setattr(stack.container.observations, "put_many", down)
    event = load_event("capture_sqs.json")
    stack.container.keyrings.update("demo", lambda _ring: Keyring(
        "demo", KeySet("v1", {"v1": b"example-identity-key-do-not-use!"}),
        KeySet("v1", {"v1": b"example-ingest-key--do-not-use!!"})))
    event["Records"].append({**event["Records"][0], "messageId": "unsigned",
                             "messageAttributes": {}})
    result = load_handler("capture")(event, LambdaContext(function_name="Capture"))
    assert sorted(f["itemIdentifier"] for f in result["batchItemFailures"]) == sorted(
        r["messageId"] for r in event["Records"][:2])


def test_example_event_is_valid_json_for_sam(repo_root: Path):
    event = json.loads((repo_root / "events" / "capture_sqs.json").read_text())
    assert all(set(r["messageAttributes"]) == {"tenant", "key_version", "signature"}
               for r in event["Records"])


def test_rotation_through_the_tenancy_service_moves_new_data_to_the_new_key(stack):
    api = load_handler("api")

    def post(oid: str) -> None:
        api_call(api, "POST", "/v1/observations", json.dumps({"items": [
            {"observation_id": oid, "deployment": "rot", "arrival": "2026-11-29T10:00:00Z",
             "input_tokens": 1, "output_tokens": 1, "latency_ms": 5, "session_id": "s-rot"}]}).encode())

    post("before")
    assert stack.container.tenancy.rotate_hmac_keys("demo", "identity") == "v2"
    post("after")
    by = {o.observation_id: o for o in stack.container.observations.query("demo", "rot", 0, 2**42)}
    keys = stack.container.keyrings.get("demo").identity
    assert (by["before"].key_version, by["after"].key_version) == ("v1", "v2")
    assert by["before"].session_id == pseudonymize("s-rot", keys, "v1")
    assert by["after"].session_id == pseudonymize("s-rot", keys, "v2")
