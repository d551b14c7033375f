"""The local stack enforces each function's IAM role and environment as AWS would: a copy of
template.yaml missing one permission (or variable) that a path needs, served with
`infercrane local serve --template`, makes that path fail, and the stack names the function and
what it was denied.

Two stacks, one after the other: the four permission mutations are independent paths, so they
share one mutated template; the missing variable is the trace build's, whose path the kms:Sign
mutation also takes, so it has a stack of its own."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests

from tests.conftest import REPO
from tests.e2e.conftest import Served, serving
from tests.e2e.test_capture_cli import partition

pytestmark = pytest.mark.slow

Mutation = Callable[[dict[str, Any]], None]
# A window above it is built asynchronously by TraceBuildFunction.
SYNC_LIMIT = 20


# -- mutations of a copy of template.yaml -------------------------------------------------------
def _policies(doc: dict[str, Any], function: str) -> list[Any]:
    return doc["Resources"][function]["Properties"]["Policies"]


def _statements(doc: dict[str, Any], function: str) -> Iterator[dict[str, Any]]:
    for policy in _policies(doc, function):
        if isinstance(policy, dict) and "Statement" in policy:
            yield from policy["Statement"]


def without_action(function: str, action: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        found = [st for st in _statements(doc, function) if action in st["Action"]]
        assert found, f"{function} has no statement allowing {action}"
        for st in found:
            st["Action"] = [a for a in st["Action"] if a != action]
    return mutate


def without_resource(function: str, suffix: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        removed = 0
        for st in _statements(doc, function):
            kept = [r for r in st["Resource"] if not json.dumps(r).endswith(f'{suffix}"}}')] \
                if isinstance(st["Resource"], list) else st["Resource"]
            removed += len(st["Resource"]) - len(kept) if isinstance(kept, list) else 0
            st["Resource"] = kept
        assert removed, f"{function} names no resource ending {suffix}"
    return mutate


def without_policy(function: str, template: str, table: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        policies = _policies(doc, function)
        target = {template: {"TableName": {"Ref": table}}}
        assert target in policies, f"{function} has no {template} on {table}"
        policies.remove(target)
    return mutate


def without_variable(function: str, name: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        del doc["Resources"][function]["Properties"]["Environment"]["Variables"][name]
    return mutate


def mutated_template(name: str, *mutations: Mutation) -> Path:
    """template.yaml with the mutations applied, as JSON (long-form intrinsics), in a folder of
    the checkout's build area so its code paths reach the real code; the folder keeps its built
    artifacts between runs (they depend on the code, not on policies)."""
    from cfnlint.decode import cfn_yaml

    folder = REPO / ".aws-sam" / "e2e-enforcement"
    folder.mkdir(parents=True, exist_ok=True)
    doc = json.loads(json.dumps(cfn_yaml.load(str(REPO / "template.yaml"))))
    for res in doc["Resources"].values():
        props = res.get("Properties") or {}
        for key in ("CodeUri", "ContentUri"):
            if key in props:
                props[key] = "../../" + props[key]
    for mutate in mutations:
        mutate(doc)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


# -- paths, as a user or a gateway takes them ---------------------------------------------------
def api(served: Served, method: str, path: str, body: Any = None) -> requests.Response:
    return requests.request(method, served.endpoint + path, json=body, timeout=60,
                            headers={"Authorization": f"Bearer {served.tenants['demo']}"})


def observe(served: Served, deployment: str, n: int) -> None:
    start = datetime.now(UTC) - timedelta(minutes=30)
    items = [{"observation_id": f"{deployment}-{i}", "deployment": deployment,
              "arrival": (start + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
              "input_tokens": 100 + i, "output_tokens": 10 + i, "latency_ms": 50.0 + i}
             for i in range(n)]
    reply = api(served, "POST", "/v1/observations", {"items": items})
    assert reply.status_code == 200 and reply.json()["rejected"] == 0, reply.text


def build(served: Served, deployment: str) -> requests.Response:
    return api(served, "POST", "/v1/traces", {"deployment": deployment, "window": "1h",
                                              "max_requests": 1000})


def logged(served: Served, *texts: str, timeout_s: float = 60) -> str:
    """The first record of the stack's log (a `LEVEL:infercrane...` line and what follows it,
    e.g. a traceback) containing every one of `texts`, waiting for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        records = re.split(r"\n(?=[A-Z]+:infercrane)", served.log())
        found = [r for r in records if all(t in r for t in texts)]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"{texts!r} never logged:\n{served.log()[-3000:]}"
        time.sleep(0.25)


def started_async_build(served: Served, deployment: str) -> str:
    observe(served, deployment, SYNC_LIMIT + 10)
    reply = build(served, deployment)
    assert reply.status_code == 202, reply.text
    return str(reply.json()["build_id"])


def build_status(served: Served, build_id: str) -> str:
    return str(api(served, "GET", f"/v1/trace-builds/{build_id}").json()["status"])


# -- the missing variable (a stack of its own, started and stopped first) -----------------------
def test_trace_build_without_its_signing_key_variable_fails_with_the_settings_error(
        tmp_path: Path) -> None:
    template = mutated_template("no-signing-variable",
                                without_variable("TraceBuildFunction", "INFERCRANE_SIGNING_KEY_ID"))
    with serving(tmp_path, "--template", str(template), "--no-schedules",
                 env={"INFERCRANE_TRACE_SYNC_LIMIT": str(SYNC_LIMIT),
                      # The caller's environment never stands in for a variable the template
                      # declares: this one must not reach the function.
                      "INFERCRANE_SIGNING_KEY_ID": "from-the-caller"}) as served:
        build_id = started_async_build(served, "enf-no-variable")
        logged(served, "TraceBuildFunction failed",
               "invalid or missing settings: INFERCRANE_SIGNING_KEY_ID")
        assert build_status(served, build_id) != "succeeded"
        assert "denied:" not in served.log()


# -- four missing permissions in one template ----------------------------------------------------
@pytest.fixture(scope="module")
def denied_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    template = mutated_template(
        "missing-permissions",
        without_action("TraceBuildFunction", "kms:Sign"),
        without_resource("ApiFunction", "/comparisons/*"),
        without_action("AdminFunction", "sqs:GetQueueUrl"),
        without_policy("CaptureFunction", "DynamoDBCrudPolicy", "ObservationsTable"))
    with serving(tmp_path_factory.mktemp("denied"), "--template", str(template), "--no-schedules",
                 env={"INFERCRANE_TRACE_SYNC_LIMIT": str(SYNC_LIMIT)}) as served:
        yield served


def test_trace_build_without_kms_sign_is_denied_signing_a_large_trace(denied_stack):
    build_id = started_async_build(denied_stack, "enf-no-sign")
    logged(denied_stack, "denied: TraceBuildFunction may not kms:Sign")
    assert build_status(denied_stack, build_id) != "succeeded"


def test_api_without_comparisons_prefix_is_denied_storing_a_comparison(denied_stack):
    digests = []
    for deployment, n in (("enf-cmp-a", 12), ("enf-cmp-b", 15)):
        observe(denied_stack, deployment, n)
        reply = build(denied_stack, deployment)
        assert reply.status_code in (200, 201), reply.text
        digests.append(reply.json()["digest"])
    done = denied_stack.cli("trace", "compare", *digests)
    assert done.returncode != 0, done.stdout
    line = logged(denied_stack, "denied: ApiFunction may not s3:PutObject")
    assert "/comparisons/" in line, line


def test_admin_without_get_queue_url_is_denied_listing_dlqs(denied_stack):
    done = denied_stack.cli("admin", "dlq", "list", tenant=None)
    assert done.returncode != 0, done.stdout
    logged(denied_stack, "denied: AdminFunction may not sqs:GetQueueUrl")


def test_capture_without_the_observations_table_is_denied_storing_a_queued_observation(
        denied_stack):
    from infercrane.edge import EdgeSigner

    sm = denied_stack.aws("secretsmanager")
    name = next(s["Name"] for s in sm.list_secrets()["SecretList"]
                if s["Name"].endswith("/tenants/demo"))
    signer = EdgeSigner.from_secret(sm.get_secret_value(SecretId=name)["SecretString"])
    sqs = denied_stack.aws("sqs")
    url = next(u for u in sqs.list_queues()["QueueUrls"] if u.endswith("-CaptureQueue"))
    arrival = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    sqs.send_message(QueueUrl=url, **signer.message([signer.observation(
        deployment="enf-capture", observation_id="enf-q-1", arrival=arrival, input_tokens=10,
        output_tokens=5, latency_ms=40.0)]))
    logged(denied_stack, "denied: CaptureFunction may not dynamodb:")
    assert partition(denied_stack, "demo", "enf-capture") == []


def test_a_presigned_url_is_authorized_for_its_signer_and_object(denied_stack):
    # The API hands large documents out as presigned URLs: moto must authorize them too.
    iam_client, s3 = denied_stack.aws("iam"), denied_stack.aws("s3")
    bucket = next(b["Name"] for b in s3.list_buckets()["Buckets"] if "documents" in b["Name"])
    iam_client.create_user(UserName="enf-reader")
    iam_client.put_user_policy(UserName="enf-reader", PolicyName="traces", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject",
                        "Resource": f"arn:aws:s3:::{bucket}/traces/*"}]}))
    key = iam_client.create_access_key(UserName="enf-reader")["AccessKey"]
    reader = boto3.client("s3", endpoint_url=denied_stack.aws_endpoint, region_name="us-east-1",
                          aws_access_key_id=key["AccessKeyId"],
                          aws_secret_access_key=key["SecretAccessKey"])
    for name in ("traces/enf/doc.json", "comparisons/enf/doc.json"):
        s3.put_object(Bucket=bucket, Key=name, Body=b"{}")
    allowed = reader.generate_presigned_url("get_object", Params={"Bucket": bucket,
                                                                  "Key": "traces/enf/doc.json"})
    refused = reader.generate_presigned_url("get_object", Params={"Bucket": bucket,
                                                                  "Key": "comparisons/enf/doc.json"})
    assert requests.get(allowed, timeout=30).content == b"{}"
    assert requests.get(refused, timeout=30).status_code == 403
    logged(denied_stack, "denied: arn:aws:iam::123456789012:user/enf-reader may not s3:GetObject")
