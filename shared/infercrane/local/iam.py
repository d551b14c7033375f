"""Each function's IAM role, enforced by the local AWS endpoint as AWS enforces it.

template.yaml is expanded the way SAM expands it (aws-sam-translator: `DynamoDBCrudPolicy` and the
other policy templates, the managed policies SAM attaches for tracing and SQS event sources), the
roles' policies are resolved to the local resources and created in moto's IAM, and each
function's environments run with STS `AssumeRole` credentials of its own role. Once the stack is
set up, moto authenticates and authorizes every request: a call the role does not allow answers
AccessDenied, and the stack logs who was denied what (`denied:` lines on its stderr).

What moto's evaluator cannot express is loosened here, never tightened, and tested statically
instead (tests/unit/test_local_iam.py; docs/architecture.md, "What the local stack enforces"):
moto authorizes S3 requests against the object's ARN and SQS requests against the queue's ARN,
every other service against `*`, so other services' statements are loaded with `Resource: *`
(their scoping is checked from the template); moto denies a statement whose `Condition` names a
key it does not supply, so conditions are dropped (allowing more, locally).

Authorization is switched on and off through moto's public `/moto-api/reset-auth`. The denial
log and the presigned-URL authorization replace moto internals, so they run only on the moto they
were checked on (adapters/library_patches.py); on another, moto's own behaviour stays: AccessDenied
is answered but not logged, and a presigned URL is refused.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

from infercrane.adapters.library_patches import may_patch
from infercrane.local.intrinsics import Resolver
from infercrane.local.template import StackTemplate

log = logging.getLogger("infercrane.local")
OPERATOR = "infercrane-local-operator"
# Services whose requests moto authorizes against the resource's ARN (S3: the object or bucket;
# SQS: the queue named by QueueUrl). Every other service is authorized against "*".
SCOPED = ("s3", "sqs")
# SQS actions that name no queue URL: moto authorizes them against "*".
SQS_UNSCOPED = frozenset({"sqs:GetQueueUrl", "sqs:ListQueues"})
# Requests AWS authorizes with other actions' permissions, which moto asks for by their own
# name: SQS's batch actions need the single action's; a DynamoDB transaction needs each item's
# action (moto cannot see the items, so any one of them allows it here).
IMPLIED = {"sqs:SendMessage": ("sqs:SendMessageBatch",),
           "sqs:DeleteMessage": ("sqs:DeleteMessageBatch",),
           "sqs:ChangeMessageVisibility": ("sqs:ChangeMessageVisibilityBatch",),
           "dynamodb:PutItem": ("dynamodb:TransactWriteItems",),
           "dynamodb:UpdateItem": ("dynamodb:TransactWriteItems",),
           "dynamodb:DeleteItem": ("dynamodb:TransactWriteItems",),
           "dynamodb:ConditionCheckItem": ("dynamodb:TransactWriteItems",),
           "dynamodb:GetItem": ("dynamodb:TransactGetItems",)}


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    def env(self) -> dict[str, str]:
        """As Lambda hands a function its role's credentials."""
        out = {"AWS_ACCESS_KEY_ID": self.access_key_id,
               "AWS_SECRET_ACCESS_KEY": self.secret_access_key}
        if self.session_token:
            out["AWS_SESSION_TOKEN"] = self.session_token
        return out

    def client_kwargs(self) -> dict[str, Any]:
        return {"aws_access_key_id": self.access_key_id,
                "aws_secret_access_key": self.secret_access_key,
                "aws_session_token": self.session_token}


def translate(template: StackTemplate, region: str) -> dict[str, Any]:
    """template.yaml as CloudFormation, expanded by SAM's own translator."""
    import boto3
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    raw = copy.deepcopy(template.raw)
    # The translator wants S3 locations for code; where the code is does not change a role.
    for res in raw.get("Resources", {}).values():
        props = res.get("Properties") or {}
        for key in ("CodeUri", "ContentUri"):
            if key in props:
                props[key] = "s3://local/code.zip"
    translator = Translator(None, Parser(), boto_session=boto3.session.Session(region_name=region))
    out: dict[str, Any] = translator.translate(raw, {"AWS::Region": region},
                                               get_managed_policy_map=dict)
    return out


def function_roles(cfn: dict[str, Any]) -> dict[str, str]:
    """Function logical id -> the logical id of the role SAM made for it."""
    out = {}
    for lid, res in cfn["Resources"].items():
        if res["Type"] == "AWS::Lambda::Function":
            role = res["Properties"]["Role"]
            out[lid] = role["Fn::GetAtt"][0] if isinstance(role, dict) else str(role)
    return out


def role_policies(cfn: dict[str, Any], role: str) -> dict[str, dict[str, Any]]:
    """A role's policies by name, as the template declares them (intrinsics unresolved): its
    inline policies, and the documents of the AWS managed policies SAM attached."""
    props = cfn["Resources"][role]["Properties"]
    out = {p["PolicyName"]: p["PolicyDocument"] for p in props.get("Policies", [])}
    for arn in props.get("ManagedPolicyArns", []):
        name = str(arn).rsplit("/", 1)[-1]
        out[name] = _aws_managed()[name]["Document"]
    return out


@functools.cache
def _aws_managed() -> dict[str, Any]:
    """AWS's managed policies, as moto ships them (a large document: read once)."""
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    managed: dict[str, Any] = json.loads(aws_managed_policies_data)
    return managed


def function_environment(cfn: dict[str, Any], function: str) -> dict[str, Any]:
    """The variables a function is deployed with: Globals plus its own (SAM merges them)."""
    env = cfn["Resources"][function]["Properties"].get("Environment") or {}
    return dict(env.get("Variables") or {})


def _service(action: str) -> str:
    return action.split(":", 1)[0].lower() if ":" in action else "*"


def localize(document: dict[str, Any]) -> dict[str, Any]:
    """A resolved policy as moto can evaluate it (module docstring): statements split by service,
    resources widened to `*` where moto authorizes against `*`, conditions dropped."""
    statements = document.get("Statement", [])
    out: list[dict[str, Any]] = []
    for st in statements if isinstance(statements, list) else [statements]:
        if "Action" not in st or "Resource" not in st:
            out.append({k: v for k, v in st.items() if k != "Condition"})
            continue
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        actions = list(dict.fromkeys([*actions, *(i for a in actions for i in IMPLIED.get(a, ()))]))
        groups: dict[str, list[str]] = {}
        for action in actions:
            service = _service(action)
            if service == "sqs" and action in SQS_UNSCOPED:
                service = "sqs-unscoped"
            groups.setdefault(service, []).append(action)
        for service, acts in groups.items():
            resource = st["Resource"] if service in SCOPED else "*"
            out.append({"Effect": st["Effect"], "Action": acts, "Resource": resource})
    return {"Version": "2012-10-17", "Statement": out}


def create_roles(iam: Any, sts: Any, cfn: dict[str, Any],
                 resolve: Resolver) -> dict[str, Credentials]:
    """Every function's role with its (localized) policies; credentials of a session of each."""
    creds: dict[str, Credentials] = {}
    for function, role in function_roles(cfn).items():
        props = cfn["Resources"][role]["Properties"]
        arn = iam.create_role(RoleName=role, MaxSessionDuration=43200,
                              AssumeRolePolicyDocument=json.dumps(
                                  props["AssumeRolePolicyDocument"]))["Role"]["Arn"]
        for name, doc in role_policies(cfn, role).items():
            iam.put_role_policy(RoleName=role, PolicyName=name,
                                PolicyDocument=json.dumps(localize(resolve(doc))))
        got = sts.assume_role(RoleArn=arn, RoleSessionName=function[:64],
                              DurationSeconds=43200)["Credentials"]
        creds[function] = Credentials(got["AccessKeyId"], got["SecretAccessKey"],
                                      got["SessionToken"])
    return creds


def create_operator(iam: Any) -> Credentials:
    """An IAM user allowed everything, as an account's administrator is: for people and tests to
    inspect tables, queues and objects once requests are authorized."""
    iam.create_user(UserName=OPERATOR)
    iam.put_user_policy(UserName=OPERATOR, PolicyName="AdministratorAccess",
                        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
                            {"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName=OPERATOR)["AccessKey"]
    return Credentials(key["AccessKeyId"], key["SecretAccessKey"])


def _reset_auth(endpoint: str, requests_before_auth: str) -> None:
    """moto's documented switch: authorize every request after the next `requests_before_auth`."""
    import urllib.request

    request = urllib.request.Request(  # noqa: S310 - http, to this process's moto server
        f"{endpoint}/moto-api/reset-auth", data=requests_before_auth.encode(), method="POST",
        headers={"Content-Type": "text/plain"})  # as a form, moto's server would not see it
    # No proxy: the server is this process's own, on a local address.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10):
        pass


def enforce(endpoint: str) -> None:
    """From now on moto at `endpoint` authenticates and authorizes every request."""
    _reset_auth(endpoint, "0")


def relax(endpoint: str) -> None:
    """moto's default again (no authorization): its settings are process-wide, and a process
    may use moto after a local stack stopped (the test tiers do)."""
    _reset_auth(endpoint, "inf")


# Role name -> function, for the stack that runs now (a process runs one at a time).
_roles: dict[str, str] = {}
# moto's own methods this module replaced, by name (empty: none replaced).
_originals: dict[str, Any] = {}
_patching = threading.Lock()


def report_denials(roles: dict[str, str]) -> None:
    """Log every request moto denies, naming the function whose role made it (role -> function),
    so a missing permission reads as one line on the stack's stderr; and authorize presigned
    URLs. Process-wide, idempotent; each patch only on the moto it was checked on."""
    _roles.clear()
    _roles.update(roles)
    with _patching:
        if "check_action_permitted" not in _originals and may_patch(
                "moto IAM denials logged with the function's name", "moto",
                "a denied request answers AccessDenied but no `denied:` line names it"):
            _log_denials()
        if "_authenticate_and_authorize_action" not in _originals and may_patch(
                "moto authorizes a presigned URL's credential", "moto",
                "a presigned URL (the API's large documents) is refused once authorization is on"):
            _authorize_presigned_urls()


def restore() -> None:
    """moto's own methods again (tests comparing against moto's own answers)."""
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.iam.access_control import IAMRequestBase

    with _patching:
        for name, original in _originals.items():
            setattr(IAMRequestBase if name == "check_action_permitted"
                    else ActionAuthenticatorMixin, name, original)
        _originals.clear()


def _log_denials() -> None:
    from moto.iam.access_control import IAMRequestBase

    original = _originals["check_action_permitted"] = IAMRequestBase.check_action_permitted

    def check_action_permitted(self: Any, resource: str) -> None:
        try:
            original(self, resource)
        except Exception:
            arn = str(getattr(self._access_key, "arn", ""))
            role = arn.split(":assumed-role/", 1)[1].split("/", 1)[0] \
                if ":assumed-role/" in arn else arn
            log.warning("denied: %s may not %s on %s (AccessDenied)", _roles.get(role, role),
                        self._action, resource)
            raise

    IAMRequestBase.check_action_permitted = check_action_permitted  # type: ignore[method-assign]


def _authorize_presigned_urls() -> None:
    """moto reads credentials only from an Authorization header, so a presigned URL (the API
    hands large documents out as one) would fail there. Its query's credential is authorized
    instead: whoever signed it must be allowed the action on the object, as on AWS. The
    signature itself is not verified locally."""
    from urllib.parse import parse_qs, urlparse

    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin

    original = ActionAuthenticatorMixin._authenticate_and_authorize_action
    _originals["_authenticate_and_authorize_action"] = original

    def authorize(self: Any, iam_request_cls: type, resource: str = "*") -> None:
        query = {k.lower(): v[0] for k, v in parse_qs(urlparse(self.uri).query).items()}
        # SigV4 names the credential scope; SigV2 (botocore's default for S3 here) the key only.
        credential = query.get("x-amz-credential") or (
            f"{query['awsaccesskeyid']}/20000101/{self.region}/s3/aws4_request"
            if "awsaccesskeyid" in query else None)
        if ("Authorization" in self.headers or credential is None
                or ActionAuthenticatorMixin.request_count < settings.INITIAL_NO_AUTH_ACTION_COUNT):
            original(self, iam_request_cls, resource)
            return
        headers = {"Authorization": f"AWS4-HMAC-SHA256 Credential={credential}, "
                                    "SignedHeaders=host, Signature=-"}
        if "x-amz-security-token" in query:
            headers["X-Amz-Security-Token"] = query["x-amz-security-token"]
        request = iam_request_cls(account_id=self.current_account, method=self.method,
                                  path=self.raw_path, data=self.data, body=self.raw_body,
                                  headers=headers, action=self._get_action())
        request.check_action_permitted(resource)

    ActionAuthenticatorMixin._authenticate_and_authorize_action = authorize  # type: ignore[method-assign]
