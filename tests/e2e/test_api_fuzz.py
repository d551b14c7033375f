"""Gate: schema-driven fuzzing of every route with Schemathesis over the service's own OpenAPI
document (Powertools generates it from the routes), against `infercrane local serve` over HTTP.

Whatever Schemathesis sends, valid or not: no 5xx, and every error is the conventions' envelope.
Beyond the schema's own values, each operation gets Schemathesis' request-shape probes (its
coverage phase: every method the path does not define, HEAD included, and malformed or
unsupported Content-Types) and a body of every other media type the service meets
(`BODY_TYPES_REFUSED`), which a route with a body answers 415, and a body the schema accepts
spoiled with a body-like key (top and nested), a non-finite number and a repeated key.
Routes that read their body themselves (observation and lifecycle batches, OTLP) declare no body in
the document; this test adds the item schemas the service validates them with, so their items are
fuzzed too. Bounded and deterministic (fixed examples per operation, derandomized) to fit
`make test`.
"""

from __future__ import annotations

import json
from typing import Any

import hypothesis
import hypothesis.errors
import pytest
import requests
import schemathesis
from schemathesis import GenerationMode
from schemathesis.generation.meta import (
    CONTENT_TYPE_PROBES,
    REQUEST_SHAPE_PROBES,
    CoverageScenario,
    coverage_scenario,
)

from infercrane.domain.capacity import AttemptIn
from infercrane.domain.capture import ObservationIn

MAX_EXAMPLES = 20
# Media types a JSON route must refuse with 415 (the one protobuf route excepted), beyond the
# text/plain and malformed multipart Schemathesis' own probes send.
BODY_TYPES_REFUSED = ("application/octet-stream", "application/x-protobuf",
                      "application/x-www-form-urlencoded")
PROTOBUF_ROUTE = "/v1/otlp/v1/traces"
CANARY = "CANARY-fuzz-body"


def _batch_of(model: Any) -> dict[str, Any]:
    items = model.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = items.pop("$defs", {})
    return {"schema": {"type": "object", "required": ["items"], "additionalProperties": False,
                       "properties": {"items": {"type": "array", "maxItems": 5, "items": items}}},
            "defs": defs}


def _with_batch_bodies(doc: dict[str, Any]) -> dict[str, Any]:
    components = doc.setdefault("components", {}).setdefault("schemas", {})
    for path, model in (("/v1/observations", ObservationIn), ("/v1/lifecycle-attempts", AttemptIn)):
        batch = _batch_of(model)
        components.update(batch["defs"])
        doc["paths"][path]["post"]["requestBody"] = {
            "required": True, "content": {"application/json": {"schema": batch["schema"]}}}
    return doc


def _check(response: Any, where: str) -> None:
    assert response.status_code < 500, where
    if response.status_code >= 400:
        doc = json.loads(response.content)
        assert set(doc) == {"error"}, where
        assert set(doc["error"]) == {"code", "message", "field"}, where
        assert isinstance(doc["error"]["code"], str) and isinstance(doc["error"]["message"], str)


def _fuzzer(operation: Any, mode: GenerationMode, base_url: str, headers: dict[str, str],
            calls: dict[str, int]) -> Any:
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis.settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None,
                         suppress_health_check=list(hypothesis.HealthCheck), database=None,
                         phases=[hypothesis.Phase.generate])
    def fuzz(case: Any) -> None:
        response = case.call(base_url=base_url, headers=headers, timeout=60)
        if response.status_code == 503:
            # A 503 is allowed only for a transient failure of a dependency (the shared 2-core
            # machine can slow moto down): the same request again must not be refused that way.
            response = case.call(base_url=base_url, headers=headers, timeout=60)
        calls[operation.label] = calls.get(operation.label, 0) + 1
        _check(response, f"{case.method} {case.formatted_path} -> {response.status_code} "
                         f"{response.content[:300]!r} for {str(case.body)[:300]}")

    return fuzz


def _operation_labels() -> list[str]:
    """The document's operations, read in-process at collection (one test each, so each has its
    own time budget); the test itself fuzzes the document the running stack serves."""
    from infercrane import __version__
    from infercrane.http.app import build_app
    from infercrane.http.routes import routers

    doc = json.loads(build_app(routers(), title="api").get_openapi_json_schema(
        title="api", version=__version__))
    return sorted(f"{method.upper()} {path}" for path, ops in doc["paths"].items() for method in ops)


@pytest.fixture(scope="module")
def operations(served) -> dict[str, Any]:
    doc = requests.get(f"{served.endpoint}/v1/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(_with_batch_bodies(doc))
    # HEAD too: API Gateway routes it like any method the template does not define.
    schema.config.phases.coverage.unexpected_methods |= {"head"}
    return {op.label: op for op in (result.ok() for result in schema.get_all_operations())}


def _probe(operation: Any, base_url: str, headers: dict[str, str], calls: dict[str, int]) -> None:
    """Schemathesis' request-shape probes, then every refused media type on a body route."""
    schema = operation.schema
    probes = [case for case in schema.iter_coverage_cases(
        operation, generation_modes=[GenerationMode.NEGATIVE],
        generation_config=schema.config.generation_for(operation=operation))
        if coverage_scenario(case) in REQUEST_SHAPE_PROBES]
    for case in probes:
        scenario = coverage_scenario(case)
        response = case.call(base_url=base_url, headers=headers, timeout=60)
        calls[f"probe {scenario}"] = calls.get(f"probe {scenario}", 0) + 1
        where = f"{case.method} {case.formatted_path} ({scenario}) -> {response.status_code}"
        if scenario is CoverageScenario.UNSPECIFIED_HTTP_METHOD:
            assert response.status_code in (403, 404), where  # API Gateway: 403; locally 404
        if case.method == "HEAD":  # the headers of the envelope, never a body
            assert response.status_code < 500 and not response.content, where
        else:
            _check(response, where)
        if scenario in CONTENT_TYPE_PROBES and operation.body \
                and case.method == operation.method.upper():
            assert response.status_code == 415, where
    if not operation.body and operation.path != PROTOBUF_ROUTE:  # OTLP reads its body itself
        return
    _hostile_bodies(operation, base_url, headers, calls)
    for media_type in BODY_TYPES_REFUSED:
        if operation.path == PROTOBUF_ROUTE and media_type == "application/x-protobuf":
            continue
        response = requests.request(operation.method.upper(), base_url + operation.path.replace(
            "{", "").replace("}", ""), data=b'{"items": []}', timeout=60,
            headers={**headers, "Content-Type": media_type})
        where = f"{operation.label} as {media_type} -> {response.status_code}"
        _check(response, where)
        assert response.status_code == 415, where
        assert response.json()["error"]["code"] == "unsupported_media_type", where


def _hostile_bodies(operation: Any, base_url: str, headers: dict[str, str],
                    calls: dict[str, int]) -> None:
    """A body the schema accepts, then spoiled: a body-like key at the top and nested, a number
    no double holds, a repeated key. Refused before any route logic: 422 / 400, never a 5xx."""
    schema = operation.schema
    case = next((c for c in schema.iter_coverage_cases(
        operation, generation_modes=[GenerationMode.POSITIVE],
        generation_config=schema.config.generation_for(operation=operation))
        if isinstance(c.body, dict)), None)
    if case is None:  # OTLP: no body in the document; test_hostile_refusals.py covers it
        return
    text = json.dumps(case.body)[1:]  # the members after '{' (or just '}')
    sep = "" if text == "}" else ", "
    spoiled = [
        (json.dumps({**case.body, "prompt": CANARY}), 422, "body_field_refused"),
        (json.dumps({**case.body, "zz": [{"messages": CANARY}]}), 422, None),
        ('{"zz": NaN' + sep + text, 400, "non_finite_number"),
        ('{"zz": 1e400' + sep + text, 400, "non_finite_number"),
        ('{"zz": 1, "zz": 2' + sep + text, 400, "duplicate_key"),
    ]
    for body, status, code in spoiled:
        response = requests.request(case.method, base_url + case.formatted_path,
                                    params=case.query, data=body.encode(), timeout=60,
                                    headers={**headers, "Content-Type": "application/json"})
        calls["probe hostile body"] = calls.get("probe hostile body", 0) + 1
        where = f"{case.method} {case.formatted_path} with {body[:120]} -> {response.status_code}"
        _check(response, where)
        assert response.status_code == status, where
        assert code is None or response.json()["error"]["code"] == code, where
        assert CANARY not in response.text, where


@pytest.mark.slow
@pytest.mark.parametrize("label", _operation_labels())
def test_no_input_gives_a_5xx_and_every_error_is_the_envelope(served, operations, label):
    assert label in operations, "the stack serves the document the routes generate"
    operation = operations[label]
    headers = {"Authorization": f"Bearer {served.tenants['demo']}"}
    calls: dict[str, int] = {}
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        try:
            _fuzzer(operation, mode, served.endpoint, headers, calls)()
        except hypothesis.errors.Unsatisfiable:
            # Only a schema with nothing to violate (plain string path parameters) has no
            # negative cases; its positive run still called it.
            assert mode is GenerationMode.NEGATIVE, label
    _probe(operation, served.endpoint, headers, calls)
    # The operation was exercised, so the gate cannot pass by fuzzing nothing.
    assert calls.get(label, 0) > 0
    assert any(name.startswith("probe ") for name in calls), calls
