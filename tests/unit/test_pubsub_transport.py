"""The Pub/Sub transport publishes the adapter message as the Cloud Function expects it."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from infercrane.adapters.pubsub_transport import PubSubTransport
from infercrane.errors import DependencyUnavailable

MESSAGE = {"schema": "infercrane.prefetch/v1", "action": "prefetch", "tenant": "demo",
           "request_id": "pf_" + "0" * 32 + "_1", "model": "sha256:" + "a" * 64,
           "adapter": "gcp", "location": "us-central1-a", "source": "projects/p/snap",
           "attempt": 1}


class Response:
    def __init__(self, status: int, doc: Any):
        self.status_code, self._doc = status, doc

    def json(self) -> Any:
        return self._doc


class Session:
    def __init__(self, response: Response | Exception):
        self.response = response
        self.calls: list[tuple[str, Any]] = []

    def post(self, url: str, json: Any, timeout: float) -> Response:
        self.calls.append((url, json))
        if isinstance(self.response, Exception):
            raise self.response
        return self.response


def test_publishes_the_message_as_base64_json_with_routing_attributes() -> None:
    session = Session(Response(200, {"messageIds": ["42"]}))
    transport = PubSubTransport(session, "projects/p/topics/infercrane-prefetch")
    assert transport.send(MESSAGE) == "42"
    [(url, payload)] = session.calls
    assert url == "https://pubsub.googleapis.com/v1/projects/p/topics/infercrane-prefetch:publish"
    [published] = payload["messages"]
    # What infra/gcp/main.py decodes: base64 data holding the adapter message.
    assert json.loads(base64.b64decode(published["data"])) == MESSAGE
    assert published["attributes"]["request_id"] == MESSAGE["request_id"]


@pytest.mark.parametrize("response", [Response(503, {}), Response(200, {}),
                                      ConnectionError("down")])
def test_publish_failures_are_dependency_errors(response: Any) -> None:
    transport = PubSubTransport(Session(response), "projects/p/topics/t")
    with pytest.raises(DependencyUnavailable):
        transport.send(MESSAGE)
