"""A JSON body is parsed once per invocation: the resolver's check hands its document to the
route that reads that very body text, and to nothing else."""

from __future__ import annotations

import gzip
import json

from infercrane.http.app import checked_event, checked_json

DOC = {"items": [{"deployment": "chat", "input_tokens": 1}]}


def event(body: str, **headers: str) -> dict:
    return {"body": body, "isBase64Encoded": False, "headers": headers, "multiValueHeaders": {}}


def test_the_route_gets_the_checked_document_for_the_same_body_text():
    text = json.dumps(DOC)
    checked = checked_event(event(text, **{"content-type": "application/json"}))
    assert checked_json(checked["body"]) == (True, DOC)
    # Equal text that is not the checked body (another request's) is parsed by its reader.
    assert checked_json("".join(list(text))) == (False, None)


def test_a_gzip_body_is_handed_over_inflated_and_parsed():
    import base64

    raw = base64.b64encode(gzip.compress(json.dumps(DOC).encode())).decode()
    ev = {**event(raw, **{"content-type": "application/json", "content-encoding": "gzip"}),
          "isBase64Encoded": True}
    checked = checked_event(ev)
    assert checked_json(checked["body"]) == (True, DOC)


def test_the_next_event_forgets_the_previous_body():
    text = json.dumps(DOC)
    checked_event(event(text))
    checked_event(event(""))
    assert checked_json(text) == (False, None)
