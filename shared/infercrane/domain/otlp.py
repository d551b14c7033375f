"""OpenTelemetry GenAI spans -> observation items (the native item shape, then the one ingest path).

Input is an OTLP `ExportTraceServiceRequest` as a JSON-shaped dict: OTLP/HTTP JSON as sent, or
protobuf decoded by `infercrane.adapters.otlp_protobuf` into the same shape. Only attributes on
the allow-list are read; every other attribute (and every span event and link) is dropped and
counted without its value being looked at: an allow-list is the only safe design, whatever new
content-bearing attribute names instrumentations invent.
"""

from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from infercrane.domain.validation import epoch_us
from infercrane.errors import InvalidInput, PayloadTooLarge

MAX_SPANS = 10_000

# Span attributes that are read. Values of anything else are never decoded.
SPAN_ALLOW = frozenset({
    "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
    "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens",  # pre-1.27 names
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.conversation.id",
    "gen_ai.request.model", "gen_ai.response.model", "gen_ai.provider.name", "gen_ai.system",
    "gen_ai.operation.name",
    "gen_ai.response.finish_reasons", "error.type", "http.response.status_code",
    "gen_ai.request.max_tokens", "gen_ai.request.stream",
})
RESOURCE_ALLOW = frozenset({"service.name", "service.version"})

# Known content carriers: dropped like everything off the allow-list, but counted apart so an
# operator can see that instrumentation is exporting content.
CONTENT_NAMES = frozenset({
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "gen_ai.tool.definitions", "gen_ai.prompt", "gen_ai.completion", "input.value",
    "output.value", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
})
CONTENT_PREFIXES = ("gen_ai.prompt.", "gen_ai.completion.", "llm.input_messages",
                    "llm.output_messages", "llm.prompts", "gen_ai.input.", "gen_ai.output.")
CONTENT_EVENTS = frozenset({
    "gen_ai.user.message", "gen_ai.assistant.message", "gen_ai.system.message",
    "gen_ai.tool.message", "gen_ai.choice", "gen_ai.client.inference.operation.details",
    "gen_ai.content.prompt", "gen_ai.content.completion",
})

STATUS_ERROR = 2

# Where a native field came from, so errors name the OTLP field the sender can fix.
OTLP_FIELD = {
    "deployment": "resource.attributes.service.name",
    "revision": "resource.attributes.service.version",
    "arrival": "startTimeUnixNano",
    "latency_ms": "endTimeUnixNano",
    "input_tokens": "attributes.gen_ai.usage.input_tokens",
    "output_tokens": "attributes.gen_ai.usage.output_tokens",
    "cached_input_tokens": "attributes.gen_ai.usage.cache_read.input_tokens",
    "session_id": "attributes.gen_ai.conversation.id",
    "streaming": "attributes.gen_ai.request.stream",
}


@dataclass(frozen=True)
class OtlpOptions:
    deployment: str | None = None  # overrides service.name
    # Some gateways put TTFT on the span under a vendor attribute; read only when named here.
    ttft_attribute: str | None = None
    ttft_unit: str = "s"  # "s" or "ms"


@dataclass
class OtlpMapping:
    items: list[dict[str, Any]] = field(default_factory=list)
    span_index: list[int] = field(default_factory=list)  # each item's span, in document order
    spans: int = 0
    ignored_spans: int = 0  # spans that are not GenAI inference calls (e.g. HTTP spans)
    dropped_attributes: int = 0
    dropped_content_attributes: int = 0


def _get(d: Mapping[str, Any], camel: str, snake: str) -> Any:
    return d.get(camel, d.get(snake))


def _list(d: Any, camel: str, snake: str) -> list[Any]:
    if not isinstance(d, Mapping):
        return []
    value = _get(d, camel, snake)
    return value if isinstance(value, list) else []


def any_value(v: Any) -> Any:
    """Decode an OTLP AnyValue (JSON form): int64 may arrive as a string."""
    if not isinstance(v, Mapping):
        return None
    if "stringValue" in v or "string_value" in v:
        return _get(v, "stringValue", "string_value")
    if "intValue" in v or "int_value" in v:
        raw = _get(v, "intValue", "int_value")
        try:
            return int(raw)
        except (TypeError, ValueError):
            return None
    if "doubleValue" in v or "double_value" in v:
        raw = _get(v, "doubleValue", "double_value")
        return raw if isinstance(raw, int | float) and not isinstance(raw, bool) else None
    if "boolValue" in v or "bool_value" in v:
        return _get(v, "boolValue", "bool_value")
    if "arrayValue" in v or "array_value" in v:
        arr = _get(v, "arrayValue", "array_value")
        return [any_value(x) for x in _list(arr, "values", "values")]
    return None


def is_content(name: str) -> bool:
    return name in CONTENT_NAMES or name.startswith(CONTENT_PREFIXES)


class _Attrs:
    """Allow-listed attribute values; counts what it drops."""

    def __init__(self, attributes: list[Any], allow: frozenset[str], mapping: OtlpMapping):
        self.values: dict[str, Any] = {}
        for kv in attributes:
            name = kv.get("key") if isinstance(kv, Mapping) else None
            if isinstance(name, str) and name in allow:
                self.values[name] = any_value(kv.get("value"))
            else:
                mapping.dropped_attributes += 1
                if isinstance(name, str) and is_content(name):
                    mapping.dropped_content_attributes += 1


def _nanos(v: Any) -> int | None:
    try:
        n = int(v)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a float infinity
        return None
    # Clamped to the last instant a datetime holds, so the arithmetic below stays finite: a span
    # time that far ahead is out of range by the one time-bounds rule (`validation.bounds_us`,
    # 422 per span), never an OverflowError.
    return min(n, _MAX_NANOS) if n >= 0 else None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_NANOS = epoch_us(datetime.max.replace(tzinfo=UTC)) * 1000


def _arrival(nanos: int) -> datetime:
    return _EPOCH + timedelta(microseconds=nanos // 1000)


def _outcome(status: Any, attrs: Mapping[str, Any]) -> str:
    code = status.get("code") if isinstance(status, Mapping) else None
    error_type = attrs.get("error.type")
    http_status = attrs.get("http.response.status_code")
    failed = code in (STATUS_ERROR, "STATUS_CODE_ERROR") or error_type not in (None, "")
    kind = str(error_type or "").lower()
    if "timeout" in kind or "timed_out" in kind or "deadline" in kind:
        return "timeout"
    if "cancel" in kind:
        return "cancelled"
    status_code = _int_or_none(http_status) or _int_or_none(kind)
    if status_code is not None and 400 <= status_code < 500:
        return "client_error"
    if status_code is not None and 500 <= status_code < 600:
        return "server_error"
    return "server_error" if failed else "ok"


def _int_or_none(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _is_inference(attrs: Mapping[str, Any]) -> bool:
    return any(k.startswith("gen_ai.usage.") or k == "gen_ai.operation.name" for k in attrs)


def _spans(document: Mapping[str, Any], mapping: OtlpMapping,
           ) -> Iterator[tuple[dict[str, Any], Mapping[str, Any]]]:
    for rs in _list(document, "resourceSpans", "resource_spans"):
        resource = _get(rs, "resource", "resource") if isinstance(rs, Mapping) else None
        res = _Attrs(_list(resource, "attributes", "attributes"), RESOURCE_ALLOW, mapping).values
        for ss in _list(rs, "scopeSpans", "scope_spans"):
            # Instrumentation scope attributes describe the library, not the call: dropped.
            scope = _get(ss, "scope", "scope") if isinstance(ss, Mapping) else None
            mapping.dropped_attributes += len(_list(scope, "attributes", "attributes"))
            for span in _list(ss, "spans", "spans"):
                yield res, span if isinstance(span, Mapping) else {}


def map_document(document: Any, options: OtlpOptions | None = None) -> OtlpMapping:
    """Every GenAI span of the request as a native observation item."""
    options = options or OtlpOptions()
    if not isinstance(document, Mapping) or not isinstance(
            _get(document, "resourceSpans", "resource_spans"), list):
        raise InvalidInput("The body must be an OTLP ExportTraceServiceRequest with resourceSpans.",
                           field="resourceSpans")
    allow = SPAN_ALLOW | ({options.ttft_attribute} if options.ttft_attribute else frozenset())
    mapping = OtlpMapping()
    for res, span in _spans(document, mapping):
        index = mapping.spans
        mapping.spans += 1
        if mapping.spans > MAX_SPANS:
            raise PayloadTooLarge(f"An export holds at most {MAX_SPANS} spans.",
                                  field="resourceSpans")
        attrs = _Attrs(_list(span, "attributes", "attributes"), allow, mapping).values
        for event in _list(span, "events", "events"):
            n = len(_list(event, "attributes", "attributes"))
            mapping.dropped_attributes += n
            if isinstance(event, Mapping) and (event.get("name") in CONTENT_EVENTS):
                mapping.dropped_content_attributes += n
        for link in _list(span, "links", "links"):
            mapping.dropped_attributes += len(_list(link, "attributes", "attributes"))
        if not _is_inference(attrs):
            mapping.ignored_spans += 1
            continue
        mapping.items.append(span_item(res, span, attrs, options))
        mapping.span_index.append(index)
    return mapping


def _trace_id(span: Mapping[str, Any]) -> str | None:
    trace = _get(span, "traceId", "trace_id")
    span_id = _get(span, "spanId", "span_id")
    if not isinstance(trace, str) or not isinstance(span_id, str) or not trace or not span_id:
        return None
    # A digest, not the ids themselves: the stored id cannot be joined back to the tenant's
    # tracing backend (where the content may live), yet a re-exported span is the same id.
    digest = hashlib.sha256(f"{trace.lower()}:{span_id.lower()}".encode()).hexdigest()
    return f"otlp-{digest[:32]}"


_MAX_FLOAT = sys.float_info.max


def span_item(res: Mapping[str, Any], span: Mapping[str, Any], attrs: Mapping[str, Any],
              options: OtlpOptions) -> dict[str, Any]:
    item: dict[str, Any] = {}
    deployment = options.deployment or res.get("service.name")
    if deployment is not None:
        item["deployment"] = deployment
    if res.get("service.version") not in (None, ""):
        item["revision"] = res["service.version"]
    oid = _trace_id(span)
    if oid:
        item["observation_id"] = oid
    start = _nanos(_get(span, "startTimeUnixNano", "start_time_unix_nano"))
    end = _nanos(_get(span, "endTimeUnixNano", "end_time_unix_nano"))
    if start is not None:
        item["arrival"] = _arrival(start)
    if start is not None and end is not None:
        item["latency_ms"] = (end - start) / 1e6
    inp = attrs.get("gen_ai.usage.input_tokens", attrs.get("gen_ai.usage.prompt_tokens"))
    out = attrs.get("gen_ai.usage.output_tokens", attrs.get("gen_ai.usage.completion_tokens"))
    if inp is not None:
        item["input_tokens"] = inp
    if out is not None:
        item["output_tokens"] = out
    if attrs.get("gen_ai.usage.cache_read.input_tokens") is not None:
        item["cached_input_tokens"] = attrs["gen_ai.usage.cache_read.input_tokens"]
    if attrs.get("gen_ai.conversation.id") not in (None, ""):
        item["session_id"] = attrs["gen_ai.conversation.id"]
    if isinstance(attrs.get("gen_ai.request.stream"), bool):
        item["streaming"] = attrs["gen_ai.request.stream"]
    ttft = attrs.get(options.ttft_attribute) if options.ttft_attribute else None
    if isinstance(ttft, int | float) and not isinstance(ttft, bool):
        # An int64 attribute no float holds (10**400) is sent on as one the schema refuses.
        value = float(ttft) if abs(ttft) <= _MAX_FLOAT else math.inf
        item["ttft_ms"] = value * 1000.0 if options.ttft_unit == "s" else value
    item["outcome"] = _outcome(_get(span, "status", "status"), attrs)
    return item
