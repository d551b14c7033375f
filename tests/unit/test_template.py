"""template.yaml is deployable as designed: these are the properties reviewers check by hand."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from infercrane.local.template import StackTemplate, load

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tpl() -> StackTemplate:
    return load(REPO / "template.yaml")


def _queues(tpl: StackTemplate) -> dict[str, dict]:
    return tpl.of_type("AWS::SQS::Queue")


def test_every_consumed_queue_has_a_dlq_redrive_and_an_alarm_on_its_depth(tpl):
    queues = _queues(tpl)
    alarms = tpl.of_type("AWS::CloudWatch::Alarm").values()
    alarmed = {a["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0] for a in alarms
               if a["Properties"]["Namespace"] == "AWS/SQS"}
    for source in tpl.sqs_sources:
        policy = queues[source.queue]["Properties"]["RedrivePolicy"]
        dlq = policy["deadLetterTargetArn"]["Fn::GetAtt"][0]
        assert dlq in queues and policy["maxReceiveCount"] >= 1
        assert dlq in alarmed, f"{dlq} has no depth alarm"


def test_queues_are_named_dead_letter_exactly_when_a_redrive_policy_targets_them(tpl):
    from infercrane.qualify.target import is_dead_letter_queue

    queues = _queues(tpl)
    # Dead-letter targets: SQS redrive policies, and DeadLetterConfig of event targets.
    targets: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("deadLetterTargetArn", "DeadLetterConfig", "DeadLetterQueue"):
                    # A Lambda function's own DLQ (DeadLetterQueue) names it as TargetArn.
                    arn = value.get("Arn", value.get("TargetArn", value))
                    targets.add(arn["Fn::GetAtt"][0])
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(tpl.resources)
    assert targets and targets <= set(queues)
    assert {name for name in queues if is_dead_letter_queue(name)} == targets


def test_every_sqs_event_source_reports_batch_item_failures(tpl):
    assert tpl.sqs_sources
    assert all(s.report_failures for s in tpl.sqs_sources)


def test_each_provider_adapter_is_its_own_function_on_its_own_queue(tpl):
    by_function = {s.function: s.queue for s in tpl.sqs_sources}
    adapters = [f for f in by_function if f.startswith("Adapter")]
    assert sorted(adapters) == ["AdapterAwsFunction", "AdapterGcpFunction", "AdapterKubernetesFunction"]
    assert len({by_function[f] for f in adapters}) == 3


def test_functions_run_python312_on_arm64_with_the_shared_layer(tpl):
    raw = tpl.resources
    layer = [k for k, v in raw.items() if v["Type"] == "AWS::Serverless::LayerVersion"]
    assert layer and raw[layer[0]]["Properties"]["ContentUri"].rstrip("/") == "shared"
    for spec in tpl.functions.values():
        props = raw[spec.logical_id]["Properties"]
        assert props.get("Runtime", "python3.12") == "python3.12"
        assert (REPO / spec.code_uri / "app.py").is_file()
        assert "Policies" in props, f"{spec.logical_id} has no least-privilege policy"


def test_required_functions_exist(tpl):
    names = {spec.short_name for spec in tpl.functions.values()}
    assert {"api", "authorizer", "capture", "aggregate", "cache_sweep", "prefetch_dispatch",
            "adapter_aws", "adapter_gcp", "adapter_kubernetes"} <= names


def test_tables_that_expire_data_declare_a_ttl_attribute(tpl):
    tables = tpl.of_type("AWS::DynamoDB::Table")
    for name in ("ObservationsTable", "CacheTable"):
        assert tables[name]["Properties"]["TimeToLiveSpecification"]["Enabled"] is True


# Public on purpose: the API description, and the key anyone needs to check a signature.
PUBLIC_ROUTES = {"/v1/openapi.json", "/v1/signing-key"}


def test_admin_routes_use_iam_and_tenant_routes_use_the_key_authorizer(tpl):
    for route in tpl.routes:
        if route.path.startswith("/v1/admin/"):
            assert route.auth == "AWS_IAM", route
        elif route.path in PUBLIC_ROUTES:
            assert route.auth == "NONE", route
        else:
            assert route.auth == "default", route
    assert tpl.authorizer == "AuthorizerFunction"


def test_one_p256_signing_key_and_only_the_api_and_trace_build_may_sign_with_it(tpl):
    keys = {k: v for k, v in tpl.of_type("AWS::KMS::Key").items()
            if v["Properties"].get("KeyUsage") == "SIGN_VERIFY"}
    assert list(keys) == ["SigningKey"]
    props = keys["SigningKey"]["Properties"]
    assert (props["KeySpec"], props["KeyUsage"]) == ("ECC_NIST_P256", "SIGN_VERIFY")
    signers = []
    for spec in tpl.functions.values():
        for policy in tpl.resources[spec.logical_id]["Properties"].get("Policies", []):
            for statement in policy.get("Statement", []) if isinstance(policy, dict) else []:
                if "kms:Sign" in statement.get("Action", []):
                    assert statement["Resource"] == {"Fn::GetAtt": ["SigningKey", "Arn"]}
                    signers.append(spec.logical_id)
    # Both store signed evidence: the API small traces and executions, TraceBuild large traces.
    assert sorted(signers) == ["ApiFunction", "TraceBuildFunction"]
    for signer in signers:
        assert tpl.functions[signer].environment["INFERCRANE_SIGNING_KEY_ID"] == {"Ref": "SigningKey"}


def test_no_function_may_read_every_secret(tpl):
    for spec in tpl.functions.values():
        text = str(tpl.resources[spec.logical_id]["Properties"].get("Policies"))
        assert "secret:*" not in text


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _requirements_file(uri: str) -> list[str]:
    return [line.strip() for line in (REPO / uri / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def test_provider_sdks_reach_only_the_functions_that_import_them(tpl):
    reaching: dict[str, set[str]] = {}
    for spec in tpl.functions.values():
        for layer in spec.layers:
            for name in _names(_requirements_file(tpl.layers[layer])):
                reaching.setdefault(name, set()).add(spec.logical_id)
    assert reaching["google-cloud-compute"] == {"AdapterGcpFunction"}
    assert reaching["kubernetes"] == {"AdapterKubernetesFunction"}
    # The Pub/Sub transport (google-auth) only where a prefetch may be dispatched to GCP.
    assert "AuthorizerFunction" not in reaching["google-auth"]
    assert "CaptureFunction" not in reaching["google-auth"]
    # Every function gets the shared layer, and none gets a workstation-only dependency.
    for spec in tpl.functions.values():
        assert "SharedLayer" in spec.layers, spec.logical_id
    workstation = _names(_pyproject()["optional-dependencies"]["cli"]) | {"aiperf", "pytest"}
    assert not workstation & set(reaching), workstation & set(reaching)


def _raw() -> dict[str, Any]:
    from cfnlint.decode import cfn_yaml

    return dict(cfn_yaml.load(str(REPO / "template.yaml")))


def _statements(tpl: StackTemplate, function: str) -> list[dict[str, Any]]:
    """A function's inline statements; one under `Fn::If` counts in whichever branch it is."""
    out: list[dict[str, Any]] = []
    for policy in tpl.resources[function]["Properties"].get("Policies", []):
        if isinstance(policy, dict) and "Statement" in policy:
            for st in policy["Statement"]:
                branches = st["Fn::If"][1:] if "Fn::If" in st else [st]
                out += [b for b in branches if b != {"Ref": "AWS::NoValue"}]
    return out


def test_every_queue_hides_a_message_for_six_times_its_consumers_timeout(tpl):
    """AWS's guidance for SQS event sources: VisibilityTimeout >= 6 x the function's Timeout
    (+ the batching window), so a retried batch is not delivered twice while still running."""
    default_timeout = _raw()["Globals"]["Function"]["Timeout"]
    queues = _queues(tpl)
    assert len(tpl.sqs_sources) >= 5
    for source in tpl.sqs_sources:
        props = tpl.resources[source.function]["Properties"]
        timeout = props.get("Timeout", default_timeout)
        window = max(int(e["Properties"].get("MaximumBatchingWindowInSeconds", 0))
                     for e in props["Events"].values() if e["Type"] == "SQS")
        visibility = queues[source.queue]["Properties"]["VisibilityTimeout"]
        assert visibility >= 6 * timeout + window, (source.queue, visibility, timeout, window)


def test_every_function_alarms_on_errors_and_throttles_and_the_api_on_5xx(tpl):
    alarms = tpl.of_type("AWS::CloudWatch::Alarm").values()
    watched = {(a["Properties"]["MetricName"], a["Properties"]["Dimensions"][0]["Value"]["Ref"])
               for a in alarms if a["Properties"]["Namespace"] == "AWS/Lambda"}
    for function in tpl.functions:
        assert ("Errors", function) in watched
        assert ("Throttles", function) in watched
    [api5xx] = [a["Properties"] for a in alarms if a["Properties"]["Namespace"] == "AWS/ApiGateway"]
    assert api5xx["MetricName"] == "5XXError"
    api_name = tpl.of_type("AWS::Serverless::Api")["Api"]["Properties"]["Name"]
    assert {"Name": "ApiName", "Value": api_name} in api5xx["Dimensions"]
    for alarm in alarms:
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": "AlarmTopic"}]


def test_alarm_email_subscribes_to_the_alarm_topic_only_when_given():
    raw = _raw()
    assert raw["Parameters"]["AlarmEmail"]["Default"] == ""
    subs = [r for r in raw["Resources"].values() if r["Type"] == "AWS::SNS::Subscription"]
    assert len(subs) == 1 and subs[0]["Condition"] == "HasAlarmEmail"
    assert subs[0]["Properties"]["TopicArn"] == {"Ref": "AlarmTopic"}
    assert subs[0]["Properties"]["Endpoint"] == {"Ref": "AlarmEmail"}


def test_volumes_and_tags_are_created_only_with_the_prefetch_key_tag(tpl):
    for spec in tpl.functions.values():
        for st in _statements(tpl, spec.logical_id):
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            for action in ("ec2:CreateVolume", "ec2:CreateTags"):
                if action not in actions or st.get("Effect") != "Allow":
                    continue
                resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
                assert "*" not in resources, (spec.logical_id, action)
                condition = str(st.get("Condition"))
                on_volumes = any("volume/" in str(r) for r in resources)
                if on_volumes and action == "ec2:CreateVolume":
                    assert "aws:RequestTag/infercrane:prefetch-key" in condition
                if action == "ec2:CreateTags":
                    assert "ec2:CreateAction" in condition and "CreateVolume" in condition


def test_iam_refusals_answer_403_signature_required_or_denied_not_no_such_route(tpl):
    responses = tpl.of_type("AWS::Serverless::Api")["Api"]["Properties"]["GatewayResponses"]
    expected = {"MISSING_AUTHENTICATION_TOKEN": "signature_required",
                "INVALID_SIGNATURE": "signature_denied", "EXPIRED_TOKEN": "signature_denied"}
    for kind, code in expected.items():
        body = json.loads(responses[kind]["ResponseTemplates"]["application/json"])
        assert responses[kind]["StatusCode"] == 403
        assert body["error"]["code"] == code


def test_no_resource_or_setting_names_the_removed_idempotency_table():
    text = (REPO / "template.yaml").read_text() + (REPO / "docs" / "architecture.md").read_text()
    assert "IdempotencyTable" not in text and "IDEMPOTENCY_TABLE" not in text


def test_every_consumed_queue_and_its_dlq_can_be_inspected_and_redriven_by_the_admin(tpl):
    """`infercrane admin dlq` lists a queue only if the admin function is configured for it, and
    can read and redrive it only if its policy lets it find, receive from and delete in the DLQ,
    and send back to the queue (never receive from or delete in the queue itself)."""
    from infercrane.bootstrap import Container
    from infercrane.local.resources import Physical, environment
    from infercrane.settings import Settings

    physical = Physical()
    for logical_id in tpl.resources:
        physical.refs[logical_id] = physical.names[logical_id] = f"ref-{logical_id}"
        physical.arns[logical_id] = f"arn-{logical_id}"
    admin = Container(Settings.from_env(environment(tpl, physical))).queue_admin
    policies = tpl.resources["AdminFunction"]["Properties"]["Policies"]
    statements = [s for p in policies if isinstance(p, dict) for s in p.get("Statement", [])]

    def granted(action: str) -> set[str]:
        return {r["Fn::GetAtt"][0] for s in statements if action in s["Action"]
                for r in s["Resource"]}

    queues = _queues(tpl)
    for source in tpl.sqs_sources:
        dlq = queues[source.queue]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]
        assert f"ref-{source.queue}" in admin._queues.values(), f"{source.queue} not in admin dlq"
        dlq_id = dlq["Fn::GetAtt"][0]
        for action in ("sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:DeleteMessage"):
            assert dlq_id in granted(action) and source.queue not in granted(action), action
        assert source.queue in granted("sqs:SendMessage")


def test_the_local_gateway_caches_authorizer_decisions_as_the_template_says(tpl):
    api = next(r for r in tpl.resources.values() if r["Type"] == "AWS::Serverless::Api")
    identity = api["Properties"]["Auth"]["Authorizers"]["TenantKeyAuthorizer"]["Identity"]
    assert tpl.authorizer_ttl_s == float(identity.get("ReauthorizeEvery", 300)) > 0


def test_every_layer_is_built_by_a_makefile_that_compiles_for_the_runtime(tpl):
    # SAM's own python3.12 build writes no bytecode, and Lambda's folders are read-only: every
    # layer is built by a makefile step that compiles with python3.12 (shared/Makefile, and the
    # provider layers' Makefiles generated with their requirements.txt).
    from infercrane.local.artifacts import layer_makefile_text

    for lid, uri in tpl.layers.items():
        assert tpl.resources[lid]["Metadata"]["BuildMethod"] == "makefile", lid
        makefile = (REPO / uri / "Makefile").read_text()
        assert f"build-{lid}:" in makefile, lid
        if uri != "shared":
            assert makefile == layer_makefile_text(lid), (
                f"{lid}: {uri}/Makefile drifted (run `make install`)")
            assert "python3.12 -m compileall" in makefile and "--no-compile" in makefile
