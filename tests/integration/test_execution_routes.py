"""Revision and execution-evidence routes through the api handler, stores in moto."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from infercrane.adapters.aiperf_format import measured_figures
from infercrane.cli.client import CliError
from infercrane.domain.execution import RunOutcome, Target, build_evidence, plan_execution
from tests.support.execution import InProcessApi, make_trace

REV_PATH = "/v1/deployments/coder-production/revisions/candidate"
NOW = datetime(2026, 11, 29, 22, 0, tzinfo=UTC)


def evidence(execution_id: str = "exe_" + "b" * 24, ttft: float = 8.0) -> dict[str, Any]:
    trace = make_trace([(100, 10), (140, 14)])
    plan = plan_execution(trace, Target(url="http://10.0.0.7:8000", model="m",
                                        revision="candidate"))
    summary = {"time_to_first_token": {"avg": ttft, "p50": ttft, "p95": ttft, "p99": ttft},
               "request_count": {"avg": 2.0}, "is_complete": True, "error_summary": []}
    return build_evidence(plan, execution_id=execution_id, started=NOW, ended=NOW,
                          outcome=RunOutcome(0, measured_figures(summary), "0.13.0",
                                             requests_completed=2))


def test_a_revision_is_stored_per_tenant_with_only_the_credential_variable_name(aws: Any) -> None:
    acme = InProcessApi("acme")
    put = acme.request("PUT", REV_PATH, {"url": "http://10.0.0.7:8000/", "model": "qwen",
                                         "api_key_env": "CANDIDATE_KEY"})
    got = acme.request("GET", REV_PATH)

    assert got == put
    assert got["url"] == "http://10.0.0.7:8000"
    assert got["api_key_env"] == "CANDIDATE_KEY"
    assert got["updated_at"].endswith("Z")
    item = aws.client("dynamodb").get_item(
        TableName=aws.settings.replay_table,
        Key={"pk": {"S": "acme"}, "sk": {"S": "REV#coder-production#candidate"}})["Item"]
    assert item["api_key_env"]["S"] == "CANDIDATE_KEY"
    with pytest.raises(CliError) as other:
        InProcessApi("other").request("GET", REV_PATH)
    assert other.value.exit_code == 4


def test_replacing_a_revision_changes_its_endpoint(aws: Any) -> None:
    acme = InProcessApi("acme")
    acme.request("PUT", REV_PATH, {"url": "http://10.0.0.7:8000"})
    acme.request("PUT", REV_PATH, {"url": "http://10.0.0.8:9000", "model": "m2"})
    assert acme.request("GET", REV_PATH)["url"] == "http://10.0.0.8:9000"


@pytest.mark.parametrize(("body", "field"), [
    ({"url": "http://admin:hunter2@10.0.0.7"}, "url"),
    ({"url": "http://10.0.0.7", "api_key_env": "sk-live-hunter2"}, "api_key_env"),
    ({"url": "http://10.0.0.7", "api_key": "hunter2"}, None),  # an unknown key is never named
])
def test_a_revision_refuses_credentials_without_echoing_them(aws: Any, body: dict[str, Any],
                                                             field: str) -> None:
    with pytest.raises(CliError) as exc:
        InProcessApi("acme").request("PUT", REV_PATH, body)
    assert exc.value.exit_code == 2
    assert exc.value.document["error"]["field"] == field
    assert "hunter2" not in json.dumps(exc.value.document)


def test_evidence_is_recorded_once_and_read_back_by_its_tenant_only(aws: Any) -> None:
    acme = InProcessApi("acme")
    doc = evidence()

    first = acme.request("POST", "/v1/executions", doc)
    again = acme.request("POST", "/v1/executions", copy.deepcopy(doc))

    assert first == again == doc
    assert acme.request("GET", f"/v1/executions/{doc['execution_id']}") == doc
    item = aws.client("dynamodb").get_item(
        TableName=aws.settings.replay_table,
        Key={"pk": {"S": "acme"}, "sk": {"S": f"EXEC#{doc['execution_id']}"}})["Item"]
    assert item["digest"]["S"] == doc["digest"]
    with pytest.raises(CliError) as other:
        InProcessApi("other").request("GET", f"/v1/executions/{doc['execution_id']}")
    assert other.value.exit_code == 4


def test_the_same_execution_id_with_other_evidence_is_a_conflict(aws: Any) -> None:
    acme = InProcessApi("acme")
    acme.request("POST", "/v1/executions", evidence(ttft=8.0))
    with pytest.raises(CliError) as exc:
        acme.request("POST", "/v1/executions", evidence(ttft=9.0))
    assert exc.value.document["error"]["code"] == "idempotency_conflict"


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d["measured"].update(request_count=3), "digest"),
    (lambda d: d.update(evidence_class="observed"), "evidence_class"),
    (lambda d: d.update(method="aiperf-replay"), "method"),
    (lambda d: d["target"].update(url="http://u:p@h"), "target.url"),
    (lambda d: d.pop("source"), "source"),
])
def test_malformed_or_tampered_evidence_is_refused_by_field(aws: Any, change: Any,
                                                            field: str) -> None:
    doc = evidence()
    change(doc)
    with pytest.raises(CliError) as exc:
        InProcessApi("acme").request("POST", "/v1/executions", doc)
    assert exc.value.exit_code == 2
    assert exc.value.document["error"]["field"] == field


@pytest.mark.parametrize("execution_id", ["exe_" + "c" * 24, "nope", "exe_../../x"])
def test_unknown_or_malformed_execution_ids_are_not_found(aws: Any, execution_id: str) -> None:
    with pytest.raises(CliError) as exc:
        InProcessApi("acme").request("GET", f"/v1/executions/{execution_id}")
    assert exc.value.exit_code == 4


def test_the_latest_execution_of_a_deployment_is_the_one_recorded_last(aws: Any) -> None:
    acme = InProcessApi("acme")
    first, second = evidence("exe_" + "b" * 24), evidence("exe_" + "c" * 24, ttft=9.0)
    deployment = first["source"]["deployment"]
    with pytest.raises(CliError) as none_yet:
        acme.request("GET", f"/v1/deployments/{deployment}/executions/latest")
    assert none_yet.value.exit_code == 4
    acme.request("POST", "/v1/executions", first)
    assert acme.request("GET", f"/v1/deployments/{deployment}/executions/latest") == first
    acme.request("POST", "/v1/executions", second)
    assert acme.request("GET", f"/v1/deployments/{deployment}/executions/latest") == second
    with pytest.raises(CliError) as other:
        InProcessApi("other").request("GET", f"/v1/deployments/{deployment}/executions/latest")
    assert other.value.exit_code == 4
