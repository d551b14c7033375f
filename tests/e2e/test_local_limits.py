"""The local stack answers Lambda's and API Gateway's limits as AWS would, over HTTP: a call past
its function's Timeout is a 504, a body over 10 MB (API Gateway) or an event over 6 MB (Lambda) is
a 413, a response over 6 MB is a 502, each in the error envelope and never a hang.

The timeout and response-size cases need a function that is slow or large on demand: they run a
copy of template.yaml with one test-only function added (tests/fixtures/functions/limits)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import REPO
from tests.e2e.conftest import Served, serving

LIMITS_FUNCTION = """\
  LimitsFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: ../../tests/fixtures/functions/limits/
      Handler: app.handler
      Timeout: 2
      MemorySize: 256
      Events:
        Slow:
          Type: Api
          Properties: { RestApiId: !Ref Api, Path: /v1/test-limits, Method: get, Auth: { Authorizer: NONE } }
"""


def _limits_template() -> Path:
    # Beside the checkout's build folder, so its CodeUri/ContentUri paths reach the real code.
    folder = REPO / ".aws-sam" / "e2e-limits"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    text = (REPO / "template.yaml").read_text()
    for key in ("CodeUri: functions/", "ContentUri: shared/", "ContentUri: layers/"):
        name, _, rest = key.partition(" ")
        text = text.replace(key, f"{name} ../../{rest}")
    text = text.replace("\nResources:\n", "\nResources:\n" + LIMITS_FUNCTION, 1)
    path = folder / "template.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def limits_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("limits"), "--template", str(_limits_template()),
                 "--no-schedules") as stack:
        yield stack


def _error(response: requests.Response) -> dict[str, object]:
    doc = response.json()
    assert set(doc) == {"error"} and set(doc["error"]) == {"code", "message", "field"}, doc
    return doc["error"]


def test_a_body_over_api_gateways_10_mb_is_a_413(served):
    body = b"{" + b" " * (10 * 1024 * 1024 - 1) + b"}"  # 10 MB + 1 byte
    response = requests.post(f"{served.endpoint}/v1/observations", data=body, timeout=60,
                             headers={"Authorization": f"Bearer {served.tenants['demo']}",
                                      "Content-Type": "application/json"})
    assert len(body) == 10 * 1024 * 1024 + 1
    assert response.status_code == 413
    assert _error(response)["code"] == "payload_too_large"


def test_an_event_over_lambdas_6_mb_is_a_413(served):
    body = b"[" + b" " * (7 * 1024 * 1024) + b"]"
    response = requests.post(f"{served.endpoint}/v1/observations", data=body, timeout=60,
                             headers={"Authorization": f"Bearer {served.tenants['demo']}",
                                      "Content-Type": "application/json"})
    assert response.status_code == 413
    assert "6 MB" in _error(response)["message"]


@pytest.mark.slow
def test_a_call_past_its_functions_timeout_is_a_504_and_the_next_call_works(limits_stack):
    # The handler would sleep 60 s: its 2 s Timeout ends it (requests' own timeout would raise).
    response = requests.get(f"{limits_stack.endpoint}/v1/test-limits", params={"sleep": "60"},
                            timeout=30)
    assert response.status_code == 504
    error = _error(response)
    assert error["code"] == "gateway_timeout" and "2 s" in error["message"]
    # The timed-out environment was replaced: the next call is served.
    again = requests.get(f"{limits_stack.endpoint}/v1/test-limits", timeout=30)
    assert again.status_code == 200


@pytest.mark.slow
def test_a_response_over_6_mb_is_a_502(limits_stack):
    response = requests.get(f"{limits_stack.endpoint}/v1/test-limits",
                            params={"bytes": str(7 * 1024 * 1024)}, timeout=30)
    assert response.status_code == 502
    assert _error(response)["code"] == "bad_gateway"
