from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infercrane import errors
from infercrane.domain.validation import error_location
from infercrane.http.errors import describe_validation_error, status_for


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    name: str = Field(pattern=r"^[a-z]+$", max_length=8)
    tokens: int = Field(ge=0, le=10)


def test_field_paths_drop_the_request_part_and_keep_indexes():
    assert error_location({"loc": ("body", "items", 3, "input_tokens")}) == "items.3.input_tokens"
    assert error_location({"loc": ("query", "limit")}) == "limit"
    assert error_location({"loc": ()}) is None


def test_an_unknown_key_is_located_by_its_parent_never_by_its_own_name():
    try:
        _Item.model_validate({"name": "ab", "tokens": 1, "CANARY-key": 1})
    except ValidationError as exc:
        err = exc.errors()[0]
    assert err["type"] == "extra_forbidden"
    assert error_location(err) is None
    assert error_location({"type": "extra_forbidden", "loc": ("body", "items", 2, "x")}) == "items.2"


def test_every_domain_error_has_a_client_status_and_conflicts_are_409():
    assert status_for(errors.IdempotencyConflict("x")) == 409
    assert status_for(errors.NotFound("x")) == 404
    assert status_for(errors.Unauthorized("x")) == 401
    assert status_for(errors.InvalidInput("x")) == 422
    assert status_for(errors.DependencyUnavailable("x")) == 503


@given(st.text(min_size=6, max_size=40).filter(lambda s: s.strip() != ""), st.integers())
def test_validation_messages_never_echo_the_submitted_value(value, number):
    canary = f"CANARY{value}"
    try:
        _Item.model_validate({"name": canary, "tokens": number, canary: canary})
    except ValidationError as exc:
        for err in exc.errors():
            message = describe_validation_error(dict(err))
            assert canary not in message
            assert value not in message or value in "Is invalid. Has an invalid format. Is too long."
