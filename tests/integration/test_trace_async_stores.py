"""Asynchronous trace builds through the real adapters on moto: the document uploaded in parts,
the build record, and a whole build (queued, run, read back) against DynamoDB, S3 and SQS."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from infercrane.adapters.s3_documents import PART_BYTES
from infercrane.domain.digest import verify_digest
from infercrane.domain.replay import TraceService, document_key
from infercrane.errors import DependencyUnavailable
from tests.fakes import BASE_MS, observation

NOW = datetime.fromtimestamp((BASE_MS + 3_600_000) / 1000, UTC)


def test_a_stream_larger_than_a_part_is_stored_by_multipart_upload(aws):
    documents = aws.container.documents
    chunks = [bytes([65 + i % 26]) * 1_000_003 for i in range(19)]  # ~19 MB: three parts
    size = documents.put_stream("traces/demo/multipart.json", iter(chunks))
    assert size == sum(map(len, chunks)) > 2 * PART_BYTES
    assert documents.get_bytes("traces/demo/multipart.json") == b"".join(chunks)


def test_a_failed_stream_leaves_no_object_and_no_open_upload(aws):
    documents = aws.container.documents

    def broken():
        yield b"x" * (PART_BYTES + 10)
        raise DependencyUnavailable("the source went away")

    with pytest.raises(DependencyUnavailable):
        documents.put_stream("traces/demo/broken.json", broken())
    s3 = aws.client("s3")
    assert s3.list_multipart_uploads(Bucket=aws.settings.documents_bucket).get("Uploads", []) == []
    assert "Contents" not in s3.list_objects_v2(Bucket=aws.settings.documents_bucket,
                                                Prefix="traces/demo/broken.json")


@pytest.mark.parametrize("select", ["head", "busiest", "representative"])
def test_a_queued_build_runs_to_the_synchronous_digest(aws, select):
    # Sessions and equal arrivals: the slice's second read, by time, must skip and drop alike.
    c = aws.container
    c.observations.put_many([observation(i, deployment="async", session_id=f"s{i // 3}",
                                         arrival_ms=BASE_MS + 100 * (i // 2),
                                         input_tokens=100 + (i * 37) % 400)
                             for i in range(30)])
    queue_url = aws.client("sqs").create_queue(QueueName="trace-builds-test")["QueueUrl"]
    from infercrane.adapters.sqs_transport import SqsTransport

    service = TraceService(c.observations, c.traces, c.documents, builds=c.trace_builds,
                           build_queue=SqsTransport(aws.client("sqs"), queue_url), sync_limit=10,
                           signer=lambda: c.signer)
    expected = c.replay.build_document("demo", "async", "1h", NOW, 25, NOW, select=select)
    assert expected["selection"]["method"] == select
    outcome = service.request_build("demo", "async", "1h", NOW, 25, NOW, "r-1", select)
    assert outcome.build is not None
    message = aws.client("sqs").receive_message(QueueUrl=queue_url)["Messages"][0]
    sent = json.loads(message["Body"])
    assert sent == {"tenant": "demo", "build_id": outcome.build["build_id"]}
    done = service.run_build("demo", sent["build_id"], lambda: NOW + timedelta(seconds=5))
    assert done["digest"] == expected["digest"]
    status = service.build_status("demo", sent["build_id"])
    assert status["status"] == "succeeded"
    assert status["trace"]["sample_count"] == expected["sample_count"]
    assert status["trace"]["selection"] == expected["selection"]
    stored = json.loads(c.documents.get_bytes(document_key("demo", expected["digest"])))
    assert verify_digest(stored) == (True, expected["digest"])
