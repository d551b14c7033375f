"""Creating the template's tables, queues, bucket and KMS keys in the local AWS endpoint (moto)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from infercrane.local.intrinsics import Resolver
from infercrane.local.template import StackTemplate

PREFIX = "infercrane-local"


@dataclass
class Physical:
    """Physical names of the template's resources, as CloudFormation's Ref/GetAtt would give."""

    refs: dict[str, str] = field(default_factory=dict)  # Ref: table name, queue URL, bucket
    arns: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # GetAtt X.QueueName etc.

    def resolver(self, parameters: dict[str, Any], region: str,
                 conditions: dict[str, Any] | None = None) -> Resolver:
        return Resolver(self.refs, self.arns, self.names, parameters, region, conditions)


def create(template: StackTemplate, session: Any, endpoint: str, region: str) -> Physical:
    out = Physical()
    ddb = session.client("dynamodb", endpoint_url=endpoint, region_name=region)
    sqs = session.client("sqs", endpoint_url=endpoint, region_name=region)
    s3 = session.client("s3", endpoint_url=endpoint, region_name=region)

    for logical_id, res in template.of_type("AWS::DynamoDB::Table").items():
        props = res["Properties"]
        name = f"{PREFIX}-{logical_id}"
        kwargs: dict[str, Any] = {
            "TableName": name,
            "AttributeDefinitions": props["AttributeDefinitions"],
            "KeySchema": props["KeySchema"],
            "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
        }
        if props.get("GlobalSecondaryIndexes"):
            kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
        if props.get("LocalSecondaryIndexes"):
            kwargs["LocalSecondaryIndexes"] = props["LocalSecondaryIndexes"]
        desc = ddb.create_table(**kwargs)["TableDescription"]
        ttl = props.get("TimeToLiveSpecification")
        if ttl:
            ddb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
        out.refs[logical_id] = name
        out.names[logical_id] = name
        out.arns[logical_id] = desc["TableArn"]

    queues = template.of_type("AWS::SQS::Queue")
    # Dead-letter queues first: a source queue's redrive policy names its DLQ's ARN.
    ordered = sorted(queues, key=lambda q: "RedrivePolicy" in queues[q].get("Properties", {}))
    for logical_id in ordered:
        props = queues[logical_id].get("Properties", {})
        name = f"{PREFIX}-{logical_id}"
        attrs: dict[str, str] = {}
        if "VisibilityTimeout" in props:
            attrs["VisibilityTimeout"] = str(props["VisibilityTimeout"])
        if "MessageRetentionPeriod" in props:
            attrs["MessageRetentionPeriod"] = str(props["MessageRetentionPeriod"])
        if "RedrivePolicy" in props:
            policy = props["RedrivePolicy"]
            attrs["RedrivePolicy"] = json.dumps({
                "deadLetterTargetArn": out.resolver({}, region)(policy["deadLetterTargetArn"]),
                "maxReceiveCount": str(policy["maxReceiveCount"]),
            })
        url = sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        out.refs[logical_id], out.arns[logical_id], out.names[logical_id] = url, arn, name

    for logical_id, res in template.of_type("AWS::S3::Bucket").items():
        name = f"{PREFIX}-{logical_id}".lower()
        s3.create_bucket(Bucket=name)
        # As the template says: a deletion deletes object versions, which only a versioned
        # bucket has (unversioned, its version-id paths would go untested).
        versioning = res.get("Properties", {}).get("VersioningConfiguration")
        if versioning:
            s3.put_bucket_versioning(Bucket=name,
                                     VersioningConfiguration={"Status": versioning["Status"]})
        out.refs[logical_id], out.names[logical_id] = name, name
        out.arns[logical_id] = f"arn:aws:s3:::{name}"

    # No usage plan exists locally: the local gateway enforces its throttle itself, so the
    # admin function's plan id is empty and it enrolls nothing.
    for logical_id in template.of_type("AWS::ApiGateway::UsagePlan"):
        out.refs[logical_id] = ""

    # The Glue database and table (AWS::Glue::*) are not created: they are a catalog for the
    # user's Athena, nothing in the stack reads them, and no function's environment names them.
    # The segments they describe are read locally with DuckDB and the same generated columns
    # (local/sql_schema.py, tests/integration/test_observation_segments_sql.py).

    kms = session.client("kms", endpoint_url=endpoint, region_name=region)
    for logical_id, res in template.of_type("AWS::KMS::Key").items():
        props = res.get("Properties", {})
        meta = kms.create_key(Description=str(props.get("Description", logical_id))[:8192],
                              KeySpec=props.get("KeySpec", "SYMMETRIC_DEFAULT"),
                              KeyUsage=props.get("KeyUsage", "ENCRYPT_DECRYPT"))["KeyMetadata"]
        out.refs[logical_id], out.arns[logical_id] = meta["KeyId"], meta["Arn"]
        out.names[logical_id] = meta["KeyId"]

    for logical_id in template.functions:
        out.refs[logical_id] = f"{PREFIX}-{logical_id}"
        out.arns[logical_id] = f"arn:aws:lambda:{region}:123456789012:function:{PREFIX}-{logical_id}"
    return out


def environment(template: StackTemplate, physical: Physical,
                region: str = "us-east-1") -> dict[str, str]:
    """Every variable any function is deployed with (Globals and each function's own), resolved
    to the local resources: the settings of a process that acts for the whole stack (the local
    stack's own provisioning, the integration tier), never a function's environment."""
    resolve = physical.resolver(template.parameters, region, template.raw.get("Conditions"))
    env: dict[str, str] = {}
    for variables in (template.globals_env, *(s.environment for s in template.functions.values())):
        env.update({k: str(resolve(v)) for k, v in variables.items()})
    return env
