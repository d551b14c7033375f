"""Fixed sentences for pydantic error types.

pydantic's own messages may quote the submitted value (a prompt, a raw identity). Every place that
reports a validation error (the HTTP error module, per-item batch errors of capture and lifecycle
ingest) words it from this one table instead, so no error ever echoes input.
"""

from __future__ import annotations

FIXED_SENTENCES: dict[str, str] = {
    "missing": "This field is required.",
    "extra_forbidden": "This field is not allowed.",
    "string_type": "Must be a string.",
    "int_type": "Must be an integer.",
    "int_parsing": "Must be an integer.",
    "int_from_float": "Must be an integer.",
    "float_type": "Must be a number.",
    "float_parsing": "Must be a number.",
    "finite_number": "Must be a finite number.",
    "bool_type": "Must be a boolean.",
    "bool_parsing": "Must be a boolean.",
    "list_type": "Must be a list.",
    "dict_type": "Must be an object.",
    "model_type": "Must be an object.",
    "model_attributes_type": "Must be an object.",
    "greater_than_equal": "Is below the allowed minimum.",
    "greater_than": "Is below the allowed minimum.",
    "less_than_equal": "Is above the allowed maximum.",
    "less_than": "Is above the allowed maximum.",
    "string_too_short": "Is too short.",
    "string_too_long": "Is too long.",
    "too_short": "Has too few items.",
    "too_long": "Has too many items.",
    "string_pattern_mismatch": "Has an invalid format.",
    "literal_error": "Is not one of the allowed values.",
    "enum": "Is not one of the allowed values.",
    "datetime_parsing": "Must be an RFC 3339 timestamp.",
    "datetime_type": "Must be an RFC 3339 timestamp.",
    "datetime_from_date_parsing": "Must be an RFC 3339 timestamp.",
    "timezone_aware": "Must carry a timezone (use Z for UTC).",
    "url_parsing": "Must be a URL.",
    "url_scheme": "Must be an http or https URL.",
}


def fixed_sentence(error_type: str) -> str:
    """The sentence for one pydantic error type; never contains the submitted value."""
    return FIXED_SENTENCES.get(error_type, "Is invalid.")
