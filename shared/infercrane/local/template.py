"""Reading template.yaml: the one source of truth for local tables, queues, bucket and wiring."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ApiRoute:
    function: str  # logical id
    method: str  # upper case
    path: str  # API Gateway template, e.g. /v1/traces/{digest}
    auth: str  # "default" (Lambda authorizer), "NONE" or "AWS_IAM"

    def matches(self, method: str, path: str) -> dict[str, str] | None:
        if method != self.method:
            return None
        pattern = "^" + re.sub(r"\\\{([A-Za-z_][A-Za-z0-9_]*)\\\}", r"(?P<\1>[^/]+)",
                               re.escape(self.path)) + "$"
        m = re.match(pattern, path)
        return m.groupdict() if m else None


@dataclass(frozen=True)
class SqsSource:
    function: str
    queue: str  # logical id
    batch_size: int
    report_failures: bool


@dataclass(frozen=True)
class Schedule:
    function: str
    name: str
    every_s: float


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    code_uri: str
    handler: str
    environment: dict[str, Any] = field(default_factory=dict)
    # What Lambda enforces, from the function (or Globals): seconds, MB, layer logical ids.
    timeout_s: float = 3.0
    memory_mb: int = 128
    layers: tuple[str, ...] = ()

    @property
    def short_name(self) -> str:
        return Path(self.code_uri).name


@dataclass
class StackTemplate:
    path: Path
    parameters: dict[str, Any]
    globals_env: dict[str, Any]
    resources: dict[str, Any]
    functions: dict[str, FunctionSpec]
    routes: list[ApiRoute]
    sqs_sources: list[SqsSource]
    schedules: list[Schedule]
    authorizer: str | None
    # Layer logical id -> its ContentUri (folder), for the layers functions name.
    layers: dict[str, str] = field(default_factory=dict)
    # (requests per second, burst) of the tenant usage plan; None if the template has none.
    tenant_throttle: tuple[float, float] | None = None
    # Seconds API Gateway caches the default authorizer's decision per Authorization header
    # (`Identity.ReauthorizeEvery`; SAM's default is 300, 0 turns caching off).
    authorizer_ttl_s: float = 0.0
    # The template as read (intrinsics in long form), for SAM's translator (local/iam.py).
    raw: dict[str, Any] = field(default_factory=dict)

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v.get("Type") == kind}

    def function(self, name: str) -> FunctionSpec:
        """A function by logical id (`CacheSweepFunction`) or code folder (`cache_sweep`)."""
        for spec in self.functions.values():
            if name in (spec.logical_id, spec.short_name, spec.short_name.replace("_", "-")):
                return spec
        raise KeyError(name)


_RATE = re.compile(r"^rate\((\d+)\s+(minute|minutes|hour|hours|day|days)\)$")


def rate_seconds(expression: str) -> float:
    m = _RATE.match(expression.strip())
    if not m:
        raise ValueError(f"unsupported schedule expression {expression!r} (use rate(...))")
    n, unit = int(m.group(1)), m.group(2)
    return n * {"minute": 60, "hour": 3600, "day": 86400}[unit.rstrip("s")]


def _plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def load(path: Path) -> StackTemplate:
    from cfnlint.decode import cfn_yaml

    raw = _plain(cfn_yaml.load(str(path)))
    resources: dict[str, Any] = raw.get("Resources", {})
    params = {k: v.get("Default") for k, v in raw.get("Parameters", {}).items()}
    globals_fn = raw.get("Globals", {}).get("Function", {})
    globals_env = globals_fn.get("Environment", {}).get("Variables", {})
    authorizer = None
    authorizer_ttl_s = 0.0
    for res in resources.values():
        if res.get("Type") == "AWS::Serverless::Api":
            auth = res.get("Properties", {}).get("Auth", {})
            default = auth.get("DefaultAuthorizer")
            if default:
                authorizer = auth["Authorizers"][default]["FunctionArn"]["Fn::GetAtt"][0]
                identity = auth["Authorizers"][default].get("Identity") or {}
                authorizer_ttl_s = float(identity.get("ReauthorizeEvery", 300))
    functions: dict[str, FunctionSpec] = {}
    routes: list[ApiRoute] = []
    sqs: list[SqsSource] = []
    schedules: list[Schedule] = []
    for logical_id, res in resources.items():
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        props = res.get("Properties", {})
        # SAM's defaults when neither the function nor Globals sets them: 3 s, 128 MB.
        layers = [_ref(x) for x in globals_fn.get("Layers", []) + props.get("Layers", [])]
        functions[logical_id] = FunctionSpec(
            logical_id, props["CodeUri"].rstrip("/"), props["Handler"],
            props.get("Environment", {}).get("Variables", {}),
            timeout_s=float(props.get("Timeout", globals_fn.get("Timeout", 3))),
            memory_mb=int(props.get("MemorySize", globals_fn.get("MemorySize", 128))),
            layers=tuple(dict.fromkeys(layers)),
        )
        for name, event in (props.get("Events") or {}).items():
            ep = event.get("Properties", {})
            if event["Type"] == "Api":
                auth = (ep.get("Auth") or {}).get("Authorizer", "default")
                routes.append(ApiRoute(logical_id, ep["Method"].upper(), ep["Path"], auth))
            elif event["Type"] == "SQS":
                queue = ep["Queue"]["Fn::GetAtt"][0]
                sqs.append(SqsSource(logical_id, queue, int(ep.get("BatchSize", 10)),
                                     "ReportBatchItemFailures" in ep.get("FunctionResponseTypes", [])))
            elif event["Type"] in ("Schedule", "ScheduleV2"):
                expr = ep.get("Schedule") or ep.get("ScheduleExpression")
                schedules.append(Schedule(logical_id, name, rate_seconds(expr)))
    layer_uris = {lid: str(res["Properties"]["ContentUri"]).rstrip("/")
                  for lid, res in resources.items()
                  if res.get("Type") == "AWS::Serverless::LayerVersion"}
    return StackTemplate(path, params, globals_env, resources, functions, routes, sqs, schedules,
                         authorizer, layer_uris, _tenant_throttle(resources, params),
                         authorizer_ttl_s, raw)


def _ref(node: Any) -> str:
    """A function's layer entry: `!Ref SomeLayer` (this template's) or a literal ARN."""
    return str(node["Ref"]) if isinstance(node, dict) and "Ref" in node else str(node)


def _tenant_throttle(resources: dict[str, Any],
                     params: dict[str, Any]) -> tuple[float, float] | None:
    def value(v: Any) -> float:
        return float(params[v["Ref"]] if isinstance(v, dict) and "Ref" in v else v)

    for res in resources.values():
        if res.get("Type") == "AWS::ApiGateway::UsagePlan":
            throttle = res.get("Properties", {}).get("Throttle") or {}
            if "RateLimit" in throttle and "BurstLimit" in throttle:
                return value(throttle["RateLimit"]), value(throttle["BurstLimit"])
    return None
