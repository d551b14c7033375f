"""One batch contract (domain/batch.py): observations and lifecycle attempts take the same envelope,
the same limit and the same item error codes. The expected codes and statuses are written here."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from infercrane.domain import batch
from infercrane.domain.capacity import CapacityService, batch_of
from infercrane.domain.capture import CaptureService, batch_items
from infercrane.domain.tenancy import Keyring, KeySet
from infercrane.errors import InvalidInput, PayloadTooLarge
from tests.support.capacity_memory import MemoryCapacityStore

NOW = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
CANARY = "CANARY-batch-contract-do-not-echo"
ENVELOPES = [pytest.param(batch_items, id="observations"), pytest.param(batch_of, id="attempts")]


def observation(**over: Any) -> dict[str, Any]:
    doc = {"deployment": "coder", "arrival": "2026-11-29T19:00:00Z", "input_tokens": 10,
           "output_tokens": 5, "latency_ms": 800.0}
    return {k: v for k, v in {**doc, **over}.items() if v is not None}


def attempt(**over: Any) -> dict[str, Any]:
    doc = {"attempt_id": "a-1", "deployment": "coder", "operation": "create", "adapter": "aws",
           "runtime": "vllm", "compute_mode": "spot", "region": "us-east-1", "gpu": "H100",
           "gpu_count": 8, "started_at": "2026-11-29T18:00:00Z",
           "finished_at": "2026-11-29T18:04:00Z", "outcome": "succeeded"}
    return {k: v for k, v in {**doc, **over}.items() if v is not None}


def capture_errors(items: list[Any]) -> list[tuple[int, str | None, str]]:
    ring = Keyring("acme", KeySet.fresh(), KeySet.fresh())
    keyrings = type("K", (), {"get": lambda self, tenant: ring})()
    _, result = CaptureService(None, keyrings, clock=lambda: NOW).prepare(  # type: ignore[arg-type]
        "acme", items)
    return [(e.index, e.field, e.code) for e in result.errors]


def capacity_errors(items: list[Any]) -> list[tuple[int, str | None, str]]:
    result = CapacityService(MemoryCapacityStore()).ingest("acme", items, NOW)
    return [(e.index, e.field, e.code) for e in result.errors]


@pytest.mark.parametrize("unwrap", ENVELOPES)
@pytest.mark.parametrize(("document", "code"), [
    ({"items": [], "extra": 1}, "unknown_field"),
    ({"items": [], CANARY: 1}, "unknown_field"),
    ({"items": [], "prompt": "x"}, "body_field_refused"),
    ({"attempts": []}, "unknown_field"),
    ([], "invalid_input"),
    ({"items": {"a": 1}}, "invalid_input"),
    ({}, "invalid_input"),
])
def test_both_envelopes_refuse_anything_but_an_items_list_alike(unwrap, document, code):
    with pytest.raises(InvalidInput) as refused:
        unwrap(document)
    assert refused.value.code == code  # each a 422 (http/errors.py)
    assert CANARY not in refused.value.message


@pytest.mark.parametrize("unwrap", ENVELOPES)
def test_both_envelopes_hold_500_items_and_refuse_501_as_too_large(unwrap):
    assert len(unwrap({"items": [{}] * 500})) == 500 == batch.MAX_BATCH
    with pytest.raises(PayloadTooLarge) as too_large:
        unwrap({"items": [{}] * 501})
    assert (too_large.value.code, too_large.value.field) == ("payload_too_large", "items")


@pytest.mark.parametrize(("bad_observation", "bad_attempt", "field", "code"), [
    ({"deployment": None}, {"deployment": None}, "deployment", "missing"),
    ({"deployment": "has space"}, {"deployment": "has space"}, "deployment", "invalid_format"),
    ({"input_tokens": -1}, {"gpu_count": -1}, None, "out_of_range"),
    ({"input_tokens": [1]}, {"gpu_count": [1]}, None, "invalid_type"),
    ({"arrival": "yesterday"}, {"started_at": "yesterday"}, None, "invalid_format"),
    ({"surplus": 1}, {"surplus": 1}, None, "unknown_field"),
    ({"prompt": CANARY}, {"prompt": CANARY}, "prompt", "body_field_refused"),
])
def test_an_item_is_refused_with_the_same_code_on_both_paths(bad_observation, bad_attempt, field,
                                                             code):
    found = capture_errors([observation(), observation(**bad_observation)])
    assert [(i, c) for i, _, c in found] == [(1, code)]
    lifecycle = capacity_errors([attempt(attempt_id="ok"), attempt(**bad_attempt)])
    assert [(i, c) for i, _, c in lifecycle] == [(1, code)]
    if field is not None:
        assert found[0][1] == lifecycle[0][1] == field
    assert code in batch.ITEM_CODES


def test_a_non_object_item_is_invalid_type_on_both_paths():
    assert capture_errors([7]) == [(0, None, "invalid_type")]
    assert capacity_errors([7]) == [(0, None, "invalid_type")]


def test_every_body_key_of_an_item_is_named_on_both_paths():
    keys = {"prompt": 1, "completion": 2}
    assert sorted(f for _, f, _ in capture_errors([observation(**keys)])) == sorted(keys)
    assert sorted(f for _, f, _ in capacity_errors([attempt(**keys)])) == sorted(keys)
