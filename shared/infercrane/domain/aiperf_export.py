"""Export a trace as AIPerf's `mooncake_trace` JSONL (one request a line, in trace order).

- `timestamp`: ms since the trace's first request (repeats allowed).
- `input_length` / `output_length`: tokens.
- `hash_ids`: the prefix-block identities (tenant HMACs) renumbered to small integers in
  first-seen order, so equal leading ids still mean a shared prefix. Omitted when a request has
  no prefix blocks.
- `session_id` where the trace has sessions (renumbered `s1`, `s2`, ... in first-seen order).
  AIPerf sends a session's accumulated history with every turn, so a continuing turn carries
  only its NEW input tokens: its input minus the previous turn's input and output (at least 1),
  and only the prefix blocks beyond those it shares with the previous turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class _Turn:
    input_tokens: int
    output_tokens: int
    blocks: list[str]


def mooncake_rows(document: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    records = document["records"]
    if not records:
        return
    first = int(records[0]["offset_ms"])
    hash_numbers: dict[str, int] = {}
    session_numbers: dict[str, str] = {}
    last_turn: dict[str, _Turn] = {}
    for record in records:
        input_tokens = int(record["input_tokens"])
        output_tokens = int(record["output_tokens"])
        blocks = list(record.get("prefix_block_ids") or [])
        row: dict[str, Any] = {"timestamp": int(record["offset_ms"]) - first}
        session = record.get("session_id")
        new_input, new_blocks = input_tokens, blocks
        if session is not None:
            label = session_numbers.setdefault(session, f"s{len(session_numbers) + 1}")
            previous = last_turn.get(session)
            if previous is not None:
                new_input = max(1, input_tokens - previous.input_tokens - previous.output_tokens)
                shared = 0
                while (shared < min(len(blocks), len(previous.blocks))
                       and blocks[shared] == previous.blocks[shared]):
                    shared += 1
                new_blocks = blocks[shared:]
                size = record.get("prefix_block_size")
                if size:
                    new_blocks = new_blocks[:-(-new_input // int(size))]
            last_turn[session] = _Turn(input_tokens, output_tokens, blocks)
            row["session_id"] = label
        row["input_length"] = new_input
        row["output_length"] = output_tokens
        if new_blocks:
            row["hash_ids"] = [hash_numbers.setdefault(b, len(hash_numbers)) for b in new_blocks]
        yield row


def mooncake_jsonl(document: Mapping[str, Any]) -> str:
    return "".join(json.dumps(row, separators=(", ", ": ")) + "\n"
                   for row in mooncake_rows(document))
