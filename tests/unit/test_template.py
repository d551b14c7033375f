"""template.yaml is deployable as designed: these are the properties reviewers check by hand."""

from __future__ import annotations

import tomllib
from pathlib import Path

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
    alarmed = {a["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0] for a in alarms}
    for source in tpl.sqs_sources:
        policy = queues[source.queue]["Properties"]["RedrivePolicy"]
        dlq = policy["deadLetterTargetArn"]["Fn::GetAtt"][0]
        assert dlq in queues and policy["maxReceiveCount"] >= 1
        assert dlq in alarmed, f"{dlq} has no depth alarm"


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
    for name in ("ObservationsTable", "CacheTable", "IdempotencyTable"):
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


def test_one_p256_signing_key_and_only_the_api_may_sign_with_it(tpl):
    keys = tpl.of_type("AWS::KMS::Key")
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
    assert signers == ["ApiFunction"]
    assert tpl.functions["ApiFunction"].environment["INFERCRANE_SIGNING_KEY_ID"] == {"Ref": "SigningKey"}


def test_no_function_may_read_every_secret(tpl):
    for spec in tpl.functions.values():
        text = str(tpl.resources[spec.logical_id]["Properties"].get("Policies"))
        assert "secret:*" not in text


def test_layer_requirements_match_the_package_dependencies():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    layer = [line.strip() for line in (REPO / "shared" / "requirements.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert sorted(layer) == sorted(declared)
