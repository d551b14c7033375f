"""What an IaC scanner does not know about template.yaml: checkov (`make validate`) checks each
resource alone; these follow references between resources and the reasons behind suppressions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
NO_VALUE = {"Ref": "AWS::NoValue"}
# What holds tenant data or keys for it: a stack deletion or a replacing update must keep it.
STATEFUL = ("AWS::DynamoDB::Table", "AWS::S3::Bucket", "AWS::KMS::Key", "AWS::Logs::LogGroup")


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    from cfnlint.decode import cfn_yaml

    from infercrane.local.template import _plain

    return dict(_plain(cfn_yaml.load(str(REPO / "template.yaml"))))


def _of_type(raw: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in raw["Resources"].items() if v["Type"] == kind}


def _target(node: Any) -> str:
    """The logical id a `!Ref X` / `!GetAtt X.Attr` names."""
    return node["Ref"] if "Ref" in node else node["Fn::GetAtt"][0]


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_no_topic_that_alarms_publish_to_uses_a_key_cloudwatch_may_not_use(raw):
    alarms = _of_type(raw, "AWS::CloudWatch::Alarm").values()
    topics = {_target(action) for alarm in alarms
              for field in ("AlarmActions", "OKActions", "InsufficientDataActions")
              for action in alarm["Properties"].get(field, [])}
    assert topics, "no alarm notifies a topic"
    for topic in topics:
        props = raw["Resources"][topic]["Properties"]
        key = props.get("KmsMasterKeyId")
        if key is None:
            continue  # unencrypted: CloudWatch can publish (the template must say why)
        # alias/aws/sns, or any other key not defined here, has a policy CloudWatch is not in.
        assert isinstance(key, dict), f"{topic} is encrypted with {key!r}, not a key of this stack"
        policy = raw["Resources"][_target(key)]["Properties"]["KeyPolicy"]
        allowed = {action for st in policy["Statement"]
                   if st["Effect"] == "Allow"
                   and st.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
                   for action in _listed(st["Action"])}
        assert {"kms:Decrypt", "kms:GenerateDataKey*"} <= allowed, (topic, allowed)


def _depth_alarmed(raw: dict[str, Any]) -> set[str]:
    return {_target(a["Properties"]["Dimensions"][0]["Value"])
            for a in _of_type(raw, "AWS::CloudWatch::Alarm").values()
            if a["Properties"]["Namespace"] == "AWS/SQS"
            and a["Properties"]["MetricName"] == "ApproximateNumberOfMessagesVisible"}


def test_every_consumed_queue_redrives_to_an_alarmed_dlq(raw):
    queues = _of_type(raw, "AWS::SQS::Queue")
    consumed = [_target(e["Properties"]["Queue"])
                for f in _of_type(raw, "AWS::Serverless::Function").values()
                for e in (f["Properties"].get("Events") or {}).values() if e["Type"] == "SQS"]
    assert len(consumed) >= 6
    for queue in consumed:
        redrive = queues[queue]["Properties"].get("RedrivePolicy")
        assert redrive, f"{queue} has no dead-letter queue"
        dlq = _target(redrive["deadLetterTargetArn"])
        assert dlq in queues and dlq != queue and int(redrive["maxReceiveCount"]) >= 1
        assert dlq in _depth_alarmed(raw), f"{dlq} has no depth alarm"


def test_every_asynchronously_invoked_function_has_an_alarmed_dlq(raw):
    # EventBridge (schedules and rules) invokes asynchronously: after Lambda's retries a failed
    # run is dropped unless the function has a DLQ or an on-failure destination.
    asynchronous = {name: f for name, f in _of_type(raw, "AWS::Serverless::Function").items()
                    if any(e["Type"] in ("Schedule", "ScheduleV2", "EventBridgeRule", "CloudWatchEvent")
                           for e in (f["Properties"].get("Events") or {}).values())}
    assert {"AggregateFunction", "CacheSweepFunction"} <= set(asynchronous)
    for name, function in asynchronous.items():
        props = function["Properties"]
        on_failure = (props.get("EventInvokeConfig") or {}).get("DestinationConfig", {}).get(
            "OnFailure", {}).get("Destination")
        dlq = (props.get("DeadLetterQueue") or {}).get("TargetArn") or on_failure
        assert dlq, f"{name} drops the runs that fail"
        assert raw["Resources"][_target(dlq)]["Type"] == "AWS::SQS::Queue"
        assert _target(dlq) in _depth_alarmed(raw), f"{name}'s DLQ has no depth alarm"


def test_every_stateful_resource_is_retained_on_deletion_and_replacement(raw):
    stateful = {name: r for name, r in raw["Resources"].items() if r["Type"] in STATEFUL}
    assert {"DirectoryTable", "ObservationsTable", "ReplayTable", "CacheTable", "CapacityTable",
            "DocumentsBucket", "SigningKey", "AlarmKey", "ApiAccessLogs"} <= set(stateful)
    for name, resource in stateful.items():
        assert resource.get("DeletionPolicy") == "Retain", name
        assert resource.get("UpdateReplacePolicy") == "Retain", name


def _adapter_aws_statements(raw: dict[str, Any]) -> list[dict[str, Any]]:
    policies = raw["Resources"]["AdapterAwsFunction"]["Properties"]["Policies"]
    return [st for p in policies if isinstance(p, dict) for st in p.get("Statement", [])]


def test_the_ebs_key_grant_exists_only_with_the_key_and_only_through_ec2(raw):
    [grant] = [st for st in _adapter_aws_statements(raw) if "Fn::If" in st]
    condition, statement, otherwise = grant["Fn::If"]
    # Present exactly when the key parameter is set.
    assert raw["Conditions"][condition] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "ExpectedSnapshotKmsKeyId"}, ""]}]}
    assert otherwise == NO_VALUE
    assert sorted(statement["Action"]) == sorted([
        "kms:CreateGrant", "kms:Decrypt", "kms:GenerateDataKeyWithoutPlaintext", "kms:ReEncrypt*",
        "kms:DescribeKey"])
    assert statement["Resource"] == {"Ref": "ExpectedSnapshotKmsKeyId"}
    assert statement["Condition"] == {
        "StringEquals": {"kms:ViaService": {"Fn::Sub": "ec2.${AWS::Region}.amazonaws.com"}}}
    # Only an ARN can be a policy's resource: the parameter refuses a bare key id.
    pattern = raw["Parameters"]["ExpectedSnapshotKmsKeyId"]["AllowedPattern"]
    assert re.match(pattern, "")
    assert re.match(pattern, "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab")
    assert not re.match(pattern, "1234abcd-12ab-34cd-56ef-1234567890ab")


def test_no_function_may_use_a_kms_key_outside_a_service_unless_it_signs(raw):
    # kms:Sign/GetPublicKey on the signing key are direct calls; any other KMS action a role gets
    # must be scoped to the service that uses the key on its behalf.
    for name, function in _of_type(raw, "AWS::Serverless::Function").items():
        for policy in function["Properties"].get("Policies", []):
            for st in policy.get("Statement", []) if isinstance(policy, dict) else []:
                for branch in (st["Fn::If"][1:] if "Fn::If" in st else [st]):
                    if branch == NO_VALUE:
                        continue
                    kms = [a for a in _listed(branch["Action"]) if a.startswith("kms:")]
                    if set(kms) - {"kms:Sign", "kms:GetPublicKey"}:
                        assert "kms:ViaService" in str(branch.get("Condition")), (name, kms)


def test_fast_snapshot_restore_can_be_disabled_on_the_snapshots_it_is_enabled_on(raw):
    # FSR is a snapshot's (per AZ) and snapshots are the operator's, never tagged by us: a tag
    # condition on Disable would let the adapter enable FSR and never stop its hourly bill.
    on_snapshots = [st for st in _adapter_aws_statements(raw) if "Fn::If" not in st
                    and "::snapshot/*" in str(st["Resource"])]
    actions = {a for st in on_snapshots if "Condition" not in st for a in _listed(st["Action"])}
    assert {"ec2:EnableFastSnapshotRestores", "ec2:DisableFastSnapshotRestores"} <= actions


def test_api_access_logs_go_to_a_log_group_with_a_retention_and_log_no_header_or_body(raw):
    api = raw["Resources"]["Api"]["Properties"]["AccessLogSetting"]
    group = raw["Resources"][_target(api["DestinationArn"])]
    assert group["Type"] == "AWS::Logs::LogGroup"
    assert int(group["Properties"]["RetentionInDays"]) > 0
    fmt = api["Format"]
    assert "$context.requestId" in fmt  # API Gateway requires it
    for leak in ("$input", "$context.requestOverride", "$context.responseOverride", "Authorization",
                 "$util"):
        assert leak not in fmt, leak


def test_every_scanner_suppression_gives_its_reason(raw):
    skips = [(name, skip) for name, r in raw["Resources"].items()
             for skip in (r.get("Metadata") or {}).get("checkov", {}).get("skip", [])]
    assert skips
    for name, skip in skips:
        assert str(skip.get("id", "")).startswith("CKV"), name
        assert len(str(skip.get("comment", "")).split()) >= 8, (name, skip.get("id"))


def test_every_queue_the_scanner_is_told_is_encrypted_is_encrypted(raw):
    # CKV_AWS_27 knows only KmsMasterKeyId; its suppressions rest on SSE-SQS being on.
    for name, queue in _of_type(raw, "AWS::SQS::Queue").items():
        props = queue["Properties"]
        assert props.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in props, name


def test_make_validate_scans_the_template_with_one_exact_checkov_version():
    # A floating version would let a new release's new checks fail a build nobody changed.
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^CHECKOV_VERSION := \d+\.\d+\.\d+$", makefile, re.M)
    assert '"checkov==$(CHECKOV_VERSION)"' in makefile
    validate = makefile.split("\nvalidate:", 1)[1].split("\n\n", 1)[0]
    assert "checkov --file template.yaml" in validate
