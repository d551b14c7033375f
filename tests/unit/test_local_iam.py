"""Each function's role and environment as the local stack derives them from template.yaml, and
what moto's evaluator cannot check, checked here from the template itself: which tables, queues,
bucket prefixes, keys and secrets each function's own statements name (moto authorizes every
service but S3 and SQS against `*`), and the conditions it drops."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pytest

from infercrane.local import iam
from infercrane.local.intrinsics import Resolver
from infercrane.local.template import StackTemplate, load
from tests.conftest import REPO

REGION = "us-east-1"


@cache
def template() -> StackTemplate:
    return load(REPO / "template.yaml")


@cache
def cfn() -> dict[str, Any]:
    return iam.translate(template(), REGION)


class _Symbols(dict[str, str]):
    """Every resource resolves to `<LogicalId>`, so statements read as the template's names."""

    def __missing__(self, key: str) -> str:
        return f"<{key}>"


def symbolic() -> Resolver:
    resolve = Resolver(_Symbols(), _Symbols(), _Symbols(), template().parameters, REGION,
                       template().raw.get("Conditions"))
    resolve.refs = _Symbols(resolve.refs)
    return resolve


def own_statements(function: str) -> list[dict[str, Any]]:
    """The function's statements from template.yaml (SAM's expansion of its Policies), without
    the AWS managed policies SAM attaches (logs, X-Ray, the SQS event source's poller)."""
    role = iam.function_roles(cfn())[function]
    names = {p["PolicyName"] for p in cfn()["Resources"][role]["Properties"].get("Policies", [])}
    out = []
    for name, doc in iam.role_policies(cfn(), role).items():
        if name in names:
            out += symbolic()(doc)["Statement"]
    return out


def _names(resource: str) -> str:
    # arn:aws:dynamodb:us-east-1:123456789012:table/<T>  ->  table/T
    short = re.sub(r"^arn:aws:[a-z0-9-]+:[a-z0-9-]*:[0-9]*:", "", resource)
    return short.replace("<", "").replace(">", "")


def scopes(function: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for st in own_statements(function):
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        for action in actions:
            out.setdefault(action.split(":")[0], set()).update(
                _names(r) for r in resources if not r.endswith("/index/*"))
    return out


TENANT_SECRETS = "secret:infercrane/tenants/*"
# What each function may reach, written from docs/architecture.md (tables, queues, documents),
# not from the template: a statement that names another function's table, queue or prefix fails.
EXPECTED: dict[str, dict[str, set[str]]] = {
    "AuthorizerFunction": {"dynamodb": {"table/DirectoryTable"}},
    "ApiFunction": {
        # DirectoryTable: the tenants' work buckets only (the LeadingKeys test below).
        "dynamodb": {"table/ObservationsTable", "table/ReplayTable", "table/CacheTable",
                     "table/CapacityTable", "DirectoryTable"},
        "sqs": {"PrefetchQueue", "TraceBuildQueue", "AdapterAwsQueue", "AdapterGcpQueue",
                "AdapterKubernetesQueue"},
        "s3": {"DocumentsBucket/traces/*", "DocumentsBucket/executions/*",
               "DocumentsBucket/comparisons/*", "DocumentsBucket/observations/*",
               "DocumentsBucket"},
        "secretsmanager": {TENANT_SECRETS},
        "kms": {"SigningKey"}},
    "AdminFunction": {
        "dynamodb": {"table/DirectoryTable", "table/ObservationsTable"},
        "s3": {"DocumentsBucket/observations/*", "DocumentsBucket"},
        "apigateway": {"/apikeys", "/usageplans/TenantUsagePlan/keys"},
        "secretsmanager": {TENANT_SECRETS},
        "sqs": {f"{q}{kind}" for q in ("Capture", "Prefetch", "AdapterAws", "AdapterGcp",
                                        "AdapterKubernetes", "TraceBuild")
                for kind in ("Queue", "DLQ")}},
    "CaptureFunction": {"dynamodb": {"table/ObservationsTable"}, "secretsmanager": {TENANT_SECRETS},
                        "s3": {"DocumentsBucket/observations/*", "DocumentsBucket"}},
    "PrefetchDispatchFunction": {
        "dynamodb": {"table/CacheTable"},
        "sqs": {"AdapterAwsQueue", "AdapterGcpQueue", "AdapterKubernetesQueue"}},
    "TraceBuildFunction": {
        "dynamodb": {"table/ObservationsTable", "table/ReplayTable"},
        "s3": {"DocumentsBucket/traces/*", "DocumentsBucket/observations/*", "DocumentsBucket"},
        "kms": {"SigningKey"}},
    "AdapterAwsFunction": {"dynamodb": {"table/CacheTable"}, "sqs": {"AdapterAwsQueue"},
                           "ec2": {"*", "volume/*", "snapshot/*"}},
    "AdapterGcpFunction": {"dynamodb": {"table/CacheTable"}, "sqs": {"AdapterGcpQueue"}},
    "AdapterKubernetesFunction": {"dynamodb": {"table/CacheTable"}, "sqs": {"AdapterKubernetesQueue"},
                                  "secretsmanager": {"secret:infercrane/kubeconfigs/*"},
                                  "eks": {"*"}},
    # A scheduled or event-invoked function sends what it failed on to its own DLQ.
    "AggregateFunction": {"dynamodb": {"table/CapacityTable"}, "sqs": {"AggregateDLQ"}},
    "LifecycleFunction": {"dynamodb": {"table/CapacityTable", "table/DirectoryTable"},
                          "sqs": {"LifecycleEventsDLQ"}},
    "CacheSweepFunction": {"dynamodb": {"table/CacheTable"},
                           "sqs": {"PrefetchQueue", "CacheSweepDLQ"}},
}


@pytest.mark.parametrize("function", sorted(EXPECTED))
def test_each_function_statements_name_only_its_own_resources(function):
    assert scopes(function) == EXPECTED[function]


def test_every_function_has_a_role_and_an_expected_scope():
    assert set(iam.function_roles(cfn())) == set(template().functions) == set(EXPECTED)


def test_the_conditions_moto_drops_are_the_adapters_tag_conditions():
    # moto denies a statement whose condition key it does not supply, so the local stack drops
    # conditions (allowing more). These are the only ones; a new one belongs in this list and in
    # docs/architecture.md ("What the local stack enforces").
    conditions = {(f, json_key) for f in EXPECTED for st in own_statements(f)
                  for op in (st.get("Condition") or {}).values() for json_key in op}
    assert conditions == {("AdapterAwsFunction", "aws:RequestTag/infercrane:prefetch-key"),
                          ("AdapterAwsFunction", "ec2:CreateAction"),
                          ("AdapterAwsFunction", "aws:ResourceTag/infercrane:prefetch-key"),
                          ("ApiFunction", "dynamodb:LeadingKeys")}


def test_the_api_may_update_only_work_buckets_in_the_directory():
    # Dropped locally (above), so held here: the api's one DirectoryTable statement is the work
    # bucket's UpdateItem on WORK# partitions, never a tenant's directory items (TENANT#) or the
    # API keys' items the authorizer trusts (APIKEY#).
    statements = [st for st in own_statements("ApiFunction")
                  if "DirectoryTable" in json.dumps(st["Resource"])]
    assert [(st["Action"], st["Condition"]) for st in statements] == [
        (["dynamodb:UpdateItem"], {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["WORK#*"]}})]


@pytest.mark.parametrize("function", sorted(EXPECTED))
def test_each_function_environment_is_globals_plus_its_own(function):
    spec = template().functions[function]
    assert iam.function_environment(cfn(), function) == {**template().globals_env,
                                                         **spec.environment}


def test_a_function_sees_no_other_function_variables():
    assert "INFERCRANE_USAGE_PLAN_ID" in iam.function_environment(cfn(), "AdminFunction")
    assert "INFERCRANE_USAGE_PLAN_ID" not in iam.function_environment(cfn(), "ApiFunction")
    assert "INFERCRANE_SIGNING_KEY_ID" not in iam.function_environment(cfn(), "CaptureFunction")


# -- what moto is given ---------------------------------------------------------------------------
def test_localize_keeps_s3_and_sqs_resources_and_widens_the_rest():
    doc = {"Statement": [{"Effect": "Allow", "Action": ["s3:PutObject", "kms:Sign"],
                          "Resource": ["arn:aws:s3:::b/traces/*", "arn:aws:kms:r:1:key/k"]},
                         {"Effect": "Allow", "Action": "sqs:ReceiveMessage",
                          "Resource": "arn:aws:sqs:r:1:q-DLQ"}]}
    assert iam.localize(doc)["Statement"] == [
        {"Effect": "Allow", "Action": ["s3:PutObject"],
         "Resource": ["arn:aws:s3:::b/traces/*", "arn:aws:kms:r:1:key/k"]},
        {"Effect": "Allow", "Action": ["kms:Sign"], "Resource": "*"},
        {"Effect": "Allow", "Action": ["sqs:ReceiveMessage"], "Resource": "arn:aws:sqs:r:1:q-DLQ"}]


def test_localize_authorizes_get_queue_url_against_any_queue_as_moto_asks():
    doc = {"Statement": [{"Effect": "Allow", "Action": ["sqs:GetQueueUrl", "sqs:GetQueueAttributes"],
                          "Resource": ["arn:aws:sqs:r:1:q-DLQ"]}]}
    assert iam.localize(doc)["Statement"] == [
        {"Effect": "Allow", "Action": ["sqs:GetQueueUrl"], "Resource": "*"},
        {"Effect": "Allow", "Action": ["sqs:GetQueueAttributes"], "Resource": ["arn:aws:sqs:r:1:q-DLQ"]}]


def test_localize_drops_conditions_and_allows_what_aws_implies():
    doc = {"Statement": [{"Effect": "Allow", "Action": ["sqs:DeleteMessage", "dynamodb:PutItem"],
                          "Resource": "arn:aws:sqs:r:1:q",
                          "Condition": {"StringEquals": {"aws:SourceAccount": "1"}}}]}
    statements = iam.localize(doc)["Statement"]
    assert all("Condition" not in st for st in statements)
    actions = {a for st in statements for a in st["Action"]}
    assert actions == {"sqs:DeleteMessage", "sqs:DeleteMessageBatch", "dynamodb:PutItem",
                       "dynamodb:TransactWriteItems"}


def test_resolver_resolves_refs_attributes_subs_and_pseudo_parameters():
    resolve = Resolver({"Table": "t-name"}, {"Queue": "arn:q"}, {"Queue": "q-name"},
                       {"Prefix": "pre", "Empty": None}, REGION)
    assert resolve({"Ref": "Table"}) == "t-name"
    assert resolve({"Ref": "Empty"}) == ""
    assert resolve({"Fn::GetAtt": ["Queue", "Arn"]}) == "arn:q"
    assert resolve({"Fn::GetAtt": "Queue.QueueName"}) == "q-name"
    assert resolve({"Fn::Sub": "${Queue.Arn}/x/${Prefix}/${AWS::Region}"}) == \
        f"arn:q/x/pre/{REGION}"
    assert resolve({"Fn::Sub": ["table/${t}:${AWS::AccountId}", {"t": {"Ref": "Table"}}]}) == \
        "table/t-name:123456789012"
    assert resolve({"Fn::Join": ["-", ["a", {"Ref": "Table"}]]}) == "a-t-name"
    with pytest.raises(ValueError, match="Fn::Select"):
        resolve({"Fn::Select": [0, ["a"]]})


def test_resolver_follows_the_templates_conditions_and_leaves_out_no_value():
    conditions = {"HasKey": {"Fn::Not": [{"Fn::Equals": [{"Ref": "Key"}, ""]}]},
                  "Both": {"Fn::And": [{"Condition": "HasKey"}, {"Fn::Equals": ["a", "a"]}]}}
    unset = Resolver({}, {}, {}, {"Key": ""}, REGION, conditions)
    given = Resolver({}, {}, {}, {"Key": "k1"}, REGION, conditions)
    statement = {"Resource": [{"Fn::If": ["Both", {"Ref": "Key"}, {"Ref": "AWS::NoValue"}]}, "x"],
                 "Sid": {"Fn::If": ["HasKey", "with", {"Ref": "AWS::NoValue"}]}}
    assert unset(statement) == {"Resource": ["x"]}
    assert given(statement) == {"Resource": ["k1", "x"], "Sid": "with"}


def test_events_env_json_gives_each_function_every_variable_it_declares():
    # `sam local invoke --env-vars events/env.json` sets, of env.json's variables, those the
    # function declares: each function must find all of its own there.
    committed = json.loads((REPO / "events" / "env.json").read_text())["Parameters"]
    for function in EXPECTED:
        missing = set(iam.function_environment(cfn(), function)) - set(committed)
        assert not missing, (function, missing)


def test_every_segment_writer_may_check_a_version_and_drop_what_it_wrote() -> None:
    # adapters/segments/writing.py checks an adopted version (HeadObject with VersionId: S3's
    # s3:GetObjectVersion, which moto does not enforce) and deletes a version no index item
    # names; without s3:ListBucket a version that is gone answers 403, not 404.
    def actions(function: str, resource: str) -> set[str]:
        found: set[str] = set()
        for st in own_statements(function):
            listed = st.get("Action", [])
            resources = st.get("Resource", [])
            listed = [listed] if isinstance(listed, str) else listed
            resources = [resources] if isinstance(resources, str) else resources
            if any(_names(r).endswith(resource) for r in resources):
                found |= set(listed)
        return found

    writers = [f for f in EXPECTED if "s3:PutObject" in actions(f, "DocumentsBucket/observations/*")]
    assert sorted(writers) == ["AdminFunction", "ApiFunction", "CaptureFunction"]
    for function in writers:
        assert {"s3:GetObjectVersion", "s3:DeleteObjectVersion"} <= actions(
            function, "DocumentsBucket/observations/*"), function
        assert "s3:ListBucket" in actions(function, "DocumentsBucket"), function
