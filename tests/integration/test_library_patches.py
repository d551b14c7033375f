"""Each patch of moto's internals run both ways: on the moto it was written for (patched) and on
a faked other version (skipped: moto's own behaviour stays), checking what a client observes.
Oracles: `cryptography` verifying a signature over the payload; AWS's documented answers
(GetSecretValue answers the version holding AWSCURRENT; a presigned URL is authorized as its
signer); moto unpatched for "moto's own behaviour". The IAM patches run on the session's moto
server with authorization on. botocore's and pynamodb's patches: tests/unit/test_library_patches.py.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import requests
from botocore.exceptions import ClientError
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_der_public_key
from moto import mock_aws

from infercrane.adapters import library_patches
from infercrane.local import iam, kms, moto_answers, moto_atomic, moto_query
from infercrane.local import moto_writes as writes_speedup
from tests.support.dynamo import create_pk_sk_table

REGION = "us-east-1"
BOTH = pytest.mark.parametrize("patched", [True, False], ids=["patched", "other-moto"])


@pytest.fixture
def version(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """The test's `patched`: False fakes a moto no patch was written for."""
    patched: bool = request.node.callspec.params["patched"]
    if not patched:
        monkeypatch.setattr(library_patches, "installed", lambda library: "0.0.1")
        monkeypatch.setattr(library_patches, "_warned", set())
    return patched


# -- KMS Sign with MessageType=DIGEST (local/kms.py) --------------------------------------------
@pytest.fixture
def moto_sign() -> Iterator[None]:
    """moto's own Sign for the test, whatever the session installed; put back after."""
    was = kms._original is not None
    kms.restore()
    yield
    kms.restore()
    if was:
        kms.honour_digest_signing()


@BOTH
def test_a_signature_over_a_digest_verifies_over_the_payload_only_when_patched(moto_sign, version,
                                                                                patched):
    assert kms.honour_digest_signing() is patched
    payload = b"the evidence document"
    digest = hashlib.sha256(payload).digest()
    with mock_aws():
        client = boto3.client("kms", region_name=REGION)
        key = client.create_key(KeyUsage="SIGN_VERIFY", KeySpec="ECC_NIST_P256")["KeyMetadata"]
        signature = client.sign(KeyId=key["KeyId"], Message=digest, MessageType="DIGEST",
                                SigningAlgorithm="ECDSA_SHA_256")["Signature"]
        public = load_der_public_key(client.get_public_key(KeyId=key["KeyId"])["PublicKey"])
    assert isinstance(public, ec.EllipticCurvePublicKey)

    def verifies(message: bytes) -> bool:
        try:
            public.verify(signature, message, ec.ECDSA(hashes.SHA256()))
            return True
        except InvalidSignature:
            return False

    # As KMS signs a DIGEST: over the payload it is the digest of. moto's own hashes it again.
    assert verifies(payload) is patched
    assert verifies(digest) is not patched


# -- DynamoDB and Secrets Manager writes (local/moto_atomic.py) --------------------------------
@pytest.fixture
def moto_writes() -> Iterator[None]:
    was = bool(moto_atomic._originals)
    moto_atomic.uninstall()
    yield
    moto_atomic.uninstall()
    if was:
        moto_atomic.install()


@BOTH
def test_get_secret_value_follows_a_moved_awscurrent_only_when_patched(moto_writes, version,
                                                                       patched):
    assert moto_atomic.install() is patched
    with mock_aws():
        sm = boto3.client("secretsmanager", region_name=REGION)
        sm.create_secret(Name="keyring", SecretString="old")
        old = sm.get_secret_value(SecretId="keyring")["VersionId"]
        new = sm.put_secret_value(SecretId="keyring", SecretString="new",
                                  VersionStages=["AWSPENDING"])["VersionId"]
        sm.update_secret_version_stage(SecretId="keyring", VersionStage="AWSCURRENT",
                                       MoveToVersionId=new, RemoveFromVersionId=old)
        answered = sm.get_secret_value(SecretId="keyring")["SecretString"]
        staged = sm.get_secret_value(SecretId="keyring", VersionStage="AWSCURRENT")["SecretString"]
    assert staged == "new"  # both ways: the stage itself moved
    # AWS answers the version holding AWSCURRENT; moto's own the one it answered before.
    assert answered == ("new" if patched else "old")


@BOTH
def test_a_transaction_answers_the_same_either_way(moto_writes, version, patched):
    """What the patch must not change: moto's decisions (the race tests need its atomicity)."""
    assert moto_atomic.install() is patched
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name=REGION)
        ddb.create_table(TableName="T", BillingMode="PAY_PER_REQUEST",
                         KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])

        def put(pk: str) -> dict[str, Any]:
            return {"Put": {"TableName": "T", "Item": {"pk": {"S": pk}},
                            "ConditionExpression": "attribute_not_exists(pk)"}}

        ddb.transact_write_items(TransactItems=[put("a"), put("b")])
        with pytest.raises(ClientError) as refused:
            ddb.transact_write_items(TransactItems=[put("c"), put("a")])
        stored = sorted(i["pk"]["S"] for i in ddb.scan(TableName="T")["Items"])
    reasons = [r["Code"] for r in refused.value.response["CancellationReasons"]]
    assert reasons == ["None", "ConditionalCheckFailed"]
    assert stored == ["a", "b"]


# -- DynamoDB speed-ups (local/moto_query.py, moto_answers.py, moto_writes.py) -----------------
SPEEDUPS = {"query": moto_query, "answers": moto_answers, "writes": writes_speedup}


def _speedup_installed(name: str) -> bool:
    """Whether moto's own method is replaced, read from moto's classes themselves."""
    from moto.dynamodb.models.dynamo_type import Item
    from moto.dynamodb.models.table import Table
    from moto.dynamodb.responses import DynamoResult

    return {"query": Table.query is moto_query.query,
            "answers": DynamoResult.execute_result is moto_answers.execute_result,
            "writes": Item.__init__ is writes_speedup.item_init}[name]


@pytest.fixture
def moto_dynamo() -> Iterator[None]:
    """moto's own DynamoDB for the test, whatever the session installed; put back after."""
    was = {name: _speedup_installed(name) for name in SPEEDUPS}
    for module in SPEEDUPS.values():
        module.uninstall()
    yield
    for name, module in SPEEDUPS.items():
        module.uninstall()
        if was[name]:
            module.install()


def _dynamo_answers() -> list[Any]:
    """A batch write, a paged Query and a GetItem, as a client reads them."""
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name=REGION)
        create_pk_sk_table(ddb, "T")
        ddb.batch_write_item(RequestItems={"T": [{"PutRequest": {"Item": {
            "pk": {"S": "p"}, "sk": {"S": f"{i:03d}"}, "n": {"N": str(i)},
            "m": {"M": {"l": {"L": [{"S": "ü"}, {"BOOL": i % 2 == 0}]}}}}}} for i in range(12)]})
        answers: list[Any] = []
        request: dict[str, Any] = {
            "TableName": "T", "KeyConditionExpression": "pk = :p AND sk > :s", "Limit": 5,
            "ExpressionAttributeValues": {":p": {"S": "p"}, ":s": {"S": "002"}}}
        while True:
            page = ddb.query(**request)
            answers.append(page)
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        answers.append(ddb.get_item(TableName="T", Key={"pk": {"S": "p"}, "sk": {"S": "007"}}))
    for answer in answers:
        answer.pop("ResponseMetadata", None)
    return answers


@pytest.mark.parametrize("name", sorted(SPEEDUPS))
@BOTH
def test_a_dynamodb_speedup_is_installed_only_when_patched_and_answers_the_same_either_way(
        moto_dynamo, version, patched, name):
    assert SPEEDUPS[name].install() is patched
    assert _speedup_installed(name) is patched
    got = _dynamo_answers()
    SPEEDUPS[name].uninstall()
    assert got == _dynamo_answers()  # oracle: moto's own, no speed-up installed
    assert [len(page.get("Items", [])) for page in got] == [5, 4, 0]


# -- IAM: denials logged, presigned URLs authorized (local/iam.py) ------------------------------
@pytest.fixture
def enforcing(moto_endpoint: str) -> Iterator[dict[str, Any]]:
    """The session's moto with a bucket, an object and a user allowed only to read it; then
    authorization on, moto's own IAM methods for the test; all put back after."""
    was = bool(iam._originals)
    iam.restore()
    session = boto3.session.Session(aws_access_key_id="setup", aws_secret_access_key="setup",
                                    region_name=REGION)
    s3 = session.client("s3", endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket="patches")
    s3.put_object(Bucket="patches", Key="doc", Body=b"large document")
    admin = session.client("iam", endpoint_url=moto_endpoint)
    admin.create_user(UserName="reader")
    admin.put_user_policy(UserName="reader", PolicyName="read", PolicyDocument=(
        '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject",'
        ' "Resource": "arn:aws:s3:::patches/*"}]}'))
    key = admin.create_access_key(UserName="reader")["AccessKey"]
    reader = boto3.session.Session(aws_access_key_id=key["AccessKeyId"],
                                   aws_secret_access_key=key["SecretAccessKey"],
                                   region_name=REGION).client("s3", endpoint_url=moto_endpoint)
    iam.enforce(moto_endpoint)
    try:
        yield {"reader": reader}
    finally:
        iam.relax(moto_endpoint)
        iam.restore()
        if was:
            iam.report_denials({})
        admin.delete_access_key(UserName="reader", AccessKeyId=key["AccessKeyId"])
        admin.delete_user_policy(UserName="reader", PolicyName="read")
        admin.delete_user(UserName="reader")
        s3.delete_object(Bucket="patches", Key="doc")
        s3.delete_bucket(Bucket="patches")


@BOTH
def test_a_presigned_url_is_authorized_as_its_signer_only_when_patched(enforcing, version,
                                                                       patched):
    iam.report_denials({})
    url = enforcing["reader"].generate_presigned_url(
        "get_object", Params={"Bucket": "patches", "Key": "doc"}, ExpiresIn=60)
    answer = requests.get(url, timeout=10)
    if patched:
        assert (answer.status_code, answer.content) == (200, b"large document")
    else:
        # moto's own reads credentials from an Authorization header only: it fails the request
        # (5.2.5 answers 500, a KeyError on the missing header), never serving the object.
        assert answer.status_code != 200 and b"large document" not in answer.content


@BOTH
def test_a_denied_request_is_logged_naming_who_only_when_patched(enforcing, version, patched,
                                                                  caplog):
    caplog.set_level(logging.WARNING, logger="infercrane.local")
    iam.report_denials({})
    with pytest.raises(ClientError) as denied:
        enforcing["reader"].put_object(Bucket="patches", Key="other", Body=b"x")
    assert denied.value.response["Error"]["Code"] == "AccessDenied"  # moto's answer either way
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("denied:")]
    if patched:
        [line] = lines
        assert "user/reader may not s3:PutObject" in line
    else:
        assert lines == []
