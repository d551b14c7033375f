"""Hostile capture messages are consumed, never retried: after one delivery the queue and its DLQ
are empty, nothing is stored, and no log line carries the body."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from infercrane.domain import signing
from infercrane.edge import EdgeSigner
from infercrane.local.workers import sqs_event
from tests.integration.test_capture_paths import load_handler
from tests.support.lambda_context import LambdaContext

CANARY = "CANARY-deep-prompt-31f7"


def queue_depth(aws, logical_id: str) -> int:
    attrs = aws.client("sqs").get_queue_attributes(
        QueueUrl=aws.physical.refs[logical_id],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])
    return sum(int(v) for v in attrs["Attributes"].values())


def test_deep_nested_prompt_and_non_ascii_signature_are_consumed_and_the_dlq_stays_empty(
        aws, monkeypatch, caplog):
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "InferCraneTest")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    aws.container.tenancy.ensure_tenant("demo", datetime.now(UTC))
    keyring = aws.container.keyrings.get("demo")
    signer = EdgeSigner(keyring)
    deep = '{"items": [{"prompt": ' + "[" * 10_000 + json.dumps(CANARY) + "]" * 10_000 + "}]}"
    version, signature = signing.sign(deep, keyring.ingest)  # signed: only the parse can fail
    good = signer.message([signer.observation(
        deployment="coder", arrival=datetime.now(UTC).isoformat(), input_tokens=1,
        output_tokens=1, latency_ms=5)])
    attrs = good["MessageAttributes"]
    deep_attrs = {**attrs, "key_version": {"DataType": "String", "StringValue": version},
                  "signature": {"DataType": "String", "StringValue": signature}}
    bad_sig = {**attrs, "signature": {"DataType": "String", "StringValue": "é☃" * 32}}
    sqs, url = aws.client("sqs"), aws.physical.refs["CaptureQueue"]
    sqs.send_message(QueueUrl=url, MessageBody=deep, MessageAttributes=deep_attrs)
    sqs.send_message(QueueUrl=url, MessageBody=good["MessageBody"], MessageAttributes=bad_sig)

    caplog.set_level(logging.DEBUG)
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                              MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"])
    messages = got["Messages"]
    assert len(messages) == 2
    result = load_handler("capture")(sqs_event(messages, aws.physical.arns["CaptureQueue"],
                                               "us-east-1"), LambdaContext(function_name="Capture"))
    assert result == {"batchItemFailures": []}
    for m in messages:  # what the event source mapping does with records that did not fail
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert queue_depth(aws, "CaptureQueue") == 0
    assert queue_depth(aws, "CaptureDLQ") == 0
    assert list(aws.container.observations.query("demo", "coder", 0, 2**42)) == []
    assert CANARY not in caplog.text
