"""The fingerprint's canonical form: an observation's content as RFC 8785 (JCS) bytes, written
member by member (`_canonical`), checked byte for byte against `rfc8785` by
tests/unit/test_capture_fingerprint.py."""

from __future__ import annotations

import json
from typing import get_args

import rfc8785

from infercrane.domain.observation import Outcome, Source, TimingSource

_json_string = json.encoder.encode_basestring  # the C escaper of json.dumps(ensure_ascii=False)
# Numbers are written by the `repr` and `str` builtins, which a type's own method would only slow
# (~40 ns a number): the schema hands over exact ints and floats (a bool, an int subclass or an
# integral float sent for a count arrives as an int, anything sent for a float as a float;
# tests/unit/test_capture_fingerprint.py holds it to that), and on those the builtins print what
# `int.__repr__` and `float.__repr__` print.
# The enums' values, escaped once.
_JSON_LITERALS = {v: _json_string(v) for v in (*get_args(Outcome), *get_args(Source),
                                               *get_args(TimingSource))}


def _jcs_number(value: float) -> str:
    """A float's RFC 8785 text: computed here where it is sure to equal the reference's, by the
    `rfc8785` library (the reference) otherwise. In [1e-4, 1e16) Python's `repr` is positional
    with the shortest round-trip digits, exactly as ECMAScript's Number::toString, except that
    an integral value ends in `.0`, which JCS drops."""
    if 1e-4 <= value < 1e16:  # `_canonical` inlines this case
        return repr(value).removesuffix(".0")
    if value == 0:  # 0.0 and -0.0 alike
        return "0"
    return rfc8785.dumps(value).decode("utf-8")


def _canonical(arrival_ms: int, deployment: str, input_tokens: int, latency_ms: float,
               outcome: str, output_tokens: int, sampling_rate: float, source: str,
               streaming: bool, timing_source: str, cached_input_tokens: int | None = None,
               parent_session_id: str | None = None, prefix_block_ids: list[str] | None = None,
               prefix_block_size: int | None = None, provenance: str | None = None,
               revision: str | None = None, session_id: str | None = None,
               shared_prefix_id: str | None = None, timing_model: str | None = None,
               ttft_ms: float | None = None) -> bytes:
    """RFC 8785 bytes of the fingerprint content (an absent optional is left out), written
    member by member in JCS order (these ASCII names sort the same by code point as by UTF-16
    unit): no dict to build and sort, no encoder to set up, per observation.

    Strings escape as the reference escapes them (the short escapes, other controls as lowercase
    \\u00XX, everything else literal); ints print alike inside 2**53, which the schema keeps
    every count and arrival far within; numbers as `_jcs_number`. A lone surrogate cannot be
    UTF-8: the reference then refuses the content and says why.
    `tests/unit/test_capture_fingerprint.py` checks byte identity against `rfc8785`."""
    text = "".join((
        '{"arrival_ms":', str(arrival_ms),
        "" if cached_input_tokens is None else ',"cached_input_tokens":' + str(cached_input_tokens),
        ',"deployment":', _json_string(deployment),
        ',"input_tokens":', str(input_tokens),
        ',"latency_ms":', repr(latency_ms).removesuffix(".0")
        if 1e-4 <= latency_ms < 1e16 else _jcs_number(latency_ms),
        ',"outcome":', _JSON_LITERALS.get(outcome) or _json_string(outcome),
        ',"output_tokens":', str(output_tokens),
        "" if parent_session_id is None else ',"parent_session_id":'
        + _json_string(parent_session_id),
        "" if prefix_block_ids is None else ',"prefix_block_ids":['
        + ",".join(map(_json_string, prefix_block_ids)) + "]",
        "" if prefix_block_size is None else ',"prefix_block_size":' + str(prefix_block_size),
        "" if provenance is None else ',"provenance":' + _json_string(provenance),
        "" if revision is None else ',"revision":' + _json_string(revision),
        ',"sampling_rate":', repr(sampling_rate).removesuffix(".0")
        if 1e-4 <= sampling_rate < 1e16 else _jcs_number(sampling_rate),
        "" if session_id is None else ',"session_id":' + _json_string(session_id),
        "" if shared_prefix_id is None else ',"shared_prefix_id":' + _json_string(shared_prefix_id),
        ',"source":', _JSON_LITERALS.get(source) or _json_string(source),
        ',"streaming":', "true" if streaming else "false",
        "" if timing_model is None else ',"timing_model":' + _json_string(timing_model),
        ',"timing_source":', _JSON_LITERALS.get(timing_source) or _json_string(timing_source),
        "" if ttft_ms is None else ',"ttft_ms":' + (
            repr(ttft_ms).removesuffix(".0") if 1e-4 <= ttft_ms < 1e16
            else _jcs_number(ttft_ms)),
        "}"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        content = {name: value for name, value in locals().items()
                   if name in _CANONICAL_FIELDS and value is not None}
        return rfc8785.dumps(content)


_CANONICAL_FIELDS = frozenset(_canonical.__code__.co_varnames[:_canonical.__code__.co_argcount])
