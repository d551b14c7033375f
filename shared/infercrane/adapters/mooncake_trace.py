"""Mooncake / AIPerf `mooncake_trace` JSONL -> `Row`s, and how its sessions carry their history.

A row has `timestamp` (ms since the first request) or `delay` (ms after the session's previous
turn ended), `input_length`, `output_length`, `hash_ids` (blocks of `--block-size` tokens) and
`session_id`. `text_input`, `messages`, `payload`, `tools` and `extra` are never read: they are
dropped and counted.

Session history: files disagree on what a continuing turn holds.
- incremental (AIPerf's `mooncake_trace`, and what `trace export` writes): a turn's
  `input_length` and `hash_ids` are its NEW tokens only, AIPerf sending the history with it; the
  stored input adds the previous turn's input and output, and its blocks extend the previous
  turn's.
- cumulative (Mooncake's conversation traces): each turn already carries the whole history, its
  `hash_ids` starting with the previous turn's; it is stored as given.
Unless `--session-history` states it, the file's evidence decides (`decide_history`): a
follow-up turn whose blocks start with every block of the previous turn but its last (that one
was partial, and the reply filled it, so its hash changed) counts for cumulative; one whose
blocks do not, for incremental. Only follow-ups of a turn with two blocks or more are evidence.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from infercrane.adapters.trace_input import ReadStats, SessionEvidence, load_json, looks_like_header
from infercrane.domain.capture import MAX_PREFIX_BLOCKS
from infercrane.domain.importers import (
    NS_PER_MS,
    SESSION_HISTORIES,
    ImportOptions,
    Row,
    RowError,
    canonical,
)
from infercrane.errors import InvalidInput

# One kind of evidence must make this share of it, or the file is refused as mixed.
DECIDED_SHARE = 0.9
# Fields that hold (or describe) content: never read, only counted.
CONTENT_FIELDS = ("text_input", "messages", "payload", "tools", "extra")
FIELDS = frozenset({"timestamp", "delay", "session_id", "input_length", "output_length",
                    "hash_ids", "type", *CONTENT_FIELDS})
# The fields a row is identified by (what the importer reads).
_READ = ("timestamp", "delay", "session_id", "input_length", "output_length", "hash_ids")
# A session keeps at most this many blocks: a longer list is refused by the service whatever
# follows, so more would only cost memory (one session spanning a file stays bounded).
_KEEP = MAX_PREFIX_BLOCKS + 1


def decide_history(stated: str | None, evidence: SessionEvidence) -> tuple[str, str | None]:
    """(history, why) — why is None when there is nothing to say (stated, or no session
    continues). Refuses mixed evidence."""
    if stated is not None:
        return stated, None
    if evidence.follow_ups == 0:
        return "incremental", None
    total = evidence.cumulative + evidence.incremental
    if total == 0:
        return "incremental", (f"{evidence.follow_ups:,} follow-up turns, none after a turn of "
                               "two blocks or more to compare with: read as incremental "
                               "(AIPerf's mooncake_trace); pass --session-history to state it")
    for history in SESSION_HISTORIES:
        share = getattr(evidence, history) / total
        if share >= DECIDED_SHARE:
            return history, (
                f"{evidence.cumulative:,} of {total:,} follow-up turns repeat the previous "
                f"turn's hash_ids blocks ({share:.0%} {history}): read as {history}")
    raise InvalidInput(
        f"Sessions are mixed: {evidence.cumulative:,} of {total:,} follow-up turns repeat the "
        "previous turn's hash_ids blocks (cumulative history) and "
        f"{evidence.incremental:,} do not (incremental); pass --session-history cumulative or "
        "incremental.", field="session_history")


class _Bad(Exception):
    def __init__(self, field_name: str | None, code: str, message: str):
        super().__init__(message)
        self.field, self.code, self.message = field_name, code, message


@dataclass
class _Turn:
    arrival_ns: int
    input_tokens: int
    output_tokens: int
    blocks: list[Any]


class _Sessions:
    """Each session's previous turn, read with one history."""

    def __init__(self, history: str, options: ImportOptions, unit: int, blocks: bool = True):
        self.history, self._options, self._unit = history, options, unit
        # Only an incremental reading that builds items needs the previous turn's blocks.
        self._blocks = blocks and history == "incremental"
        self._turns: dict[str, _Turn] = {}

    def resolve(self, key: str | None, new_input: int, output: int, blocks: list[Any],
                ts: Decimal | None, wait: Decimal | None) -> tuple[int, int, list[Any]]:
        previous = self._turns.get(key) if key is not None else None
        input_tokens, full = new_input, blocks
        if previous is not None and self.history == "incremental":
            input_tokens = new_input + previous.input_tokens + previous.output_tokens
            if self._blocks:
                full = (previous.blocks + blocks)[:_KEEP]
        if ts is not None:
            arrival = int(ts * self._unit)
        elif previous is not None:
            # AIPerf waits `delay` after the previous turn's response: its (modelled) latency.
            _, latency = self._options.model.timing(previous.input_tokens,
                                                    previous.output_tokens)
            arrival = previous.arrival_ns + int(Decimal(str(latency)) * NS_PER_MS) + int(
                (wait or 0) * self._unit)
        elif wait is not None:
            arrival = int(wait * self._unit)
        else:
            raise _Bad("timestamp", "missing", "A row needs a timestamp, or a delay after an "
                       "earlier turn of its session.")
        if key is not None:
            self._turns[key] = _Turn(arrival, input_tokens, output,
                                     full if self._blocks else [])
        return arrival, input_tokens, full


class MooncakeReader:
    """Reads one pass. The check pass (`check`) reads identities and arrivals only: its rows'
    blocks are the row's own, so no session's history is held. `options.session_history` None
    (checking only): rows are read as incremental while the evidence is gathered and each row
    carries its cumulative arrival too. Memory per open session: its previous turn's numbers,
    and in an incremental send its blocks (at most 4,097)."""

    def __init__(self, options: ImportOptions, unit: int, stats: ReadStats, check: bool = False):
        self._options, self._stats = options, stats
        stated = options.session_history
        self._main = _Sessions(stated or "incremental", options, unit, blocks=not check)
        self._alt = None if stated else _Sessions("cumulative", options, unit, blocks=False)
        # Evidence, undecided only: each session's previous turn's block count and a digest of
        # its blocks but the last.
        self._previous: dict[str, tuple[int, bytes]] = {}
        self._first = True

    def row(self, line: int, raw: str | None) -> Row | RowError | None:
        """The line's row, its rejection, or None for a header line (counted)."""
        stats = self._stats
        if raw is None:
            return RowError(line, None, "line_too_long", "This line is over 8 MiB; it was skipped.")
        try:
            row = load_json(raw)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            first, self._first = self._first, False
            if first and looks_like_header(raw):
                stats.header_lines += 1
                return None
            return RowError(line, None, "unreadable_record", "This line is not a JSON object.")
        self._first = False
        for name in row:
            if name in CONTENT_FIELDS:
                stats.dropped_fields[name] += 1
            elif name not in FIELDS:
                stats.ignored_fields[str(name)[:64]] += 1
        try:
            return self._row(line, row)
        except _Bad as bad:
            return RowError(line, bad.field, bad.code, bad.message)

    def _row(self, line: int, row: dict[str, Any]) -> Row:
        new_input, output = _whole(row, "input_length"), _whole(row, "output_length")
        blocks = row.get("hash_ids")
        if blocks is not None and (not isinstance(blocks, list) or any(
                isinstance(b, bool) or not isinstance(b, int | str) for b in blocks)):
            raise _Bad("hash_ids", "invalid_type", "hash_ids is a list of integers.")
        session = row.get("session_id")
        if session is not None and (isinstance(session, bool)
                                    or not isinstance(session, str | int)):
            raise _Bad("session_id", "invalid_type", "session_id is a string.")
        key = None if session is None else str(session)
        timestamp, delay = row.get("timestamp"), row.get("delay")
        if timestamp is not None and delay is not None:
            raise _Bad("delay", "invalid_format", "A row has a timestamp or a delay, not both.")
        try:
            ts = None if timestamp is None else _number(timestamp)
            wait = None if delay is None else _number(delay)
        except ValueError:
            raise _Bad("timestamp" if timestamp is not None else "delay", "invalid_type",
                       "timestamp and delay are non-negative numbers.") from None
        given = list(blocks or [])
        if self._alt is not None and key is not None:
            self._weigh(key, given)
        arrival, input_tokens, full = self._main.resolve(key, new_input, output, given, ts, wait)
        alt = None
        if self._alt is not None:
            alt, _, _ = self._alt.resolve(key, new_input, output, given, ts, wait)
        if ts is not None:
            self._stats.saw_timestamp(ts)
        fields: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output}
        if key is not None:
            fields["session_id"] = key  # a raw id: the service HMACs it with the tenant's key
        if full:
            fields["prefix_block_ids"] = full
            fields["prefix_block_size"] = self._options.block_size
        content = canonical({name: row[name] for name in _READ if name in row})
        return Row(line, arrival, fields, content, alt)

    def _weigh(self, key: str, blocks: list[Any]) -> None:
        previous = self._previous.get(key)
        self._previous[key] = (len(blocks), _digest(blocks[:-1]))
        if previous is None:
            return
        evidence = self._stats.evidence
        evidence.follow_ups += 1
        count, kept = previous
        if count < 2:
            return
        if len(blocks) >= count - 1 and _digest(blocks[:count - 1]) == kept:
            evidence.cumulative += 1
        else:
            evidence.incremental += 1


def _digest(blocks: list[Any]) -> bytes:
    return hashlib.sha256(canonical(blocks)).digest()


def _number(value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("number")
    number = Decimal(str(value))
    if not number.is_finite() or number < 0:
        raise ValueError("number")
    return number


def _whole(row: dict[str, Any], name: str) -> int:
    value = row.get(name)
    if value is None:
        if name == "input_length" and any(f in row for f in CONTENT_FIELDS):
            raise _Bad(name, "missing", "A row with text but no input_length has no known "
                       "length; its text is never read.")
        raise _Bad(name, "missing", f"{name} is required.")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Bad(name, "invalid_type", f"{name} is a whole number of tokens.")
    return value
