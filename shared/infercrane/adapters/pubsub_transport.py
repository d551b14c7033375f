"""Google Pub/Sub adapter of the message-transport port, for a GCP adapter deployed as a Cloud
Function (infra/gcp/main.py consumes the topic's CloudEvents; the message data is the same
`infercrane.prefetch/v1` JSON an adapter queue receives).

It publishes through the Pub/Sub REST API with an injected authorized session (for example
`google.auth.transport.requests.AuthorizedSession` built from workload identity federation), so
no Pub/Sub client library is needed in the Lambda layer.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from infercrane.errors import DependencyUnavailable


class PubSubTransport:
    def __init__(self, session: Any, topic: str, *,
                 endpoint: str = "https://pubsub.googleapis.com", timeout_s: float = 10.0):
        # topic: projects/<project>/topics/<name>
        self._session = session
        self.topic = topic
        self._url = f"{endpoint.rstrip('/')}/v1/{topic}:publish"
        self._timeout = timeout_s

    def send(self, body: dict[str, Any]) -> str:
        data = base64.b64encode(json.dumps(body, sort_keys=True).encode()).decode()
        # Attributes let a subscription filter without decoding; they carry no model content.
        attributes = {k: str(body[k]) for k in ("schema", "action", "tenant", "request_id")
                      if k in body}
        try:
            resp = self._session.post(self._url, json={"messages": [
                {"data": data, "attributes": attributes}]}, timeout=self._timeout)
        except Exception as exc:  # the session's transport errors (requests, google-auth)
            raise DependencyUnavailable("Pub/Sub is unavailable.") from exc
        if resp.status_code >= 300:
            raise DependencyUnavailable("Pub/Sub refused the message.")
        ids = (resp.json() or {}).get("messageIds") or []
        if not ids:
            raise DependencyUnavailable("Pub/Sub returned no message id.")
        return str(ids[0])
