"""Import inputs as users have them: compression by first bytes, pipes read once, bounded lines,
the format sniffed from the first lines, rows identified by their content and ordinal, and the
session history stated or decided from the file's evidence."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import zstandard

from infercrane.adapters import trace_input
from infercrane.adapters.mooncake_trace import decide_history
from infercrane.adapters.trace_files import scan, stream_rows
from infercrane.adapters.trace_input import SessionEvidence, TraceInput
from infercrane.domain.importers import ImportOptions, Row, RowError, RowIdentity, ServiceTimeModel
from infercrane.errors import InvalidInput

AZURE = (b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
         b"2023-11-16 18:17:03.9799600,4808,10\n"
         b"2023-11-16 18:17:03.9799600,4808,10\n"
         b"2023-11-16 18:17:05.0000999,3180,8\n")
START = datetime(2026, 11, 29, tzinfo=UTC)
COMPRESSORS = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress,
               "zstd": lambda d: zstandard.ZstdCompressor().compress(d)}


def write(tmp_path: Path, data: bytes, name: str = "trace.txt") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def rows_of(name: str, fmt: str = "azure-csv", **options: Any) -> tuple[Any, list[Any]]:
    source = TraceInput(name)
    facts = scan(source, ImportOptions(fmt, "d", **options))
    rows = list(stream_rows(source, facts.options))
    source.close()
    # The send pass must find the rows the check pass digested (the CLI fails otherwise).
    identity = RowIdentity()
    for row in rows:
        if isinstance(row, Row):
            identity.row_key(row.content, row.arrival_ns)
    assert identity.digest() == facts.rows_sha256
    return facts, rows


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_compression_is_read_by_its_first_bytes_whatever_the_name(tmp_path, kind):
    plain, _ = rows_of(write(tmp_path, AZURE, "plain.csv"))
    # Two members/frames back to back, as `cat a.gz b.gz` makes: both are read.
    half = AZURE.index(b"2023-11-16 18:17:05")
    data = COMPRESSORS[kind](AZURE[:half]) + COMPRESSORS[kind](AZURE[half:])
    facts, _rows = rows_of(write(tmp_path, data, "trace.csv"))
    assert (facts.compression, facts.records, facts.rejected) == (kind, 3, 0)
    assert facts.rows_sha256 == plain.rows_sha256


def test_a_damaged_stream_is_refused_naming_its_compression(tmp_path):
    cut = gzip.compress(AZURE * 50)[:-20]
    with pytest.raises(InvalidInput) as refused:
        rows_of(write(tmp_path, cut, "trace.csv.gz"))
    assert "gzip stream is damaged" in refused.value.message


def test_a_pipe_is_read_once_and_the_send_pass_reads_the_spool(tmp_path):
    read_fd, write_fd = os.pipe()
    data = gzip.compress(AZURE)

    def feed() -> None:
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(data)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        facts, rows = rows_of(f"/dev/fd/{read_fd}")
    finally:
        feeder.join()
        os.close(read_fd)
    plain, plain_rows = rows_of(write(tmp_path, AZURE, "plain.csv"))
    assert (facts.records, facts.size, facts.rows_sha256) == (3, len(data), plain.rows_sha256)
    assert [(r.arrival_ns, r.fields) for r in rows] == [(r.arrival_ns, r.fields)
                                                         for r in plain_rows]


def test_a_line_over_the_limit_is_one_rejection_and_is_never_held(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_input, "MAX_LINE", 200)
    good = json.dumps({"timestamp": 0, "input_length": 5, "output_length": 1})
    long = json.dumps({"timestamp": 1, "input_length": 5, "output_length": 1,
                       "text_input": "x" * 5000})
    _facts, rows = rows_of(write(tmp_path, f"{good}\n{long}\n{good}\n".encode()),
                          "mooncake-jsonl", start=START)
    assert [type(r).__name__ for r in rows] == ["Row", "RowError", "Row"]
    assert (rows[1].line, rows[1].code) == (2, "line_too_long")
    assert rows[2].line == 3


@pytest.mark.parametrize(("data", "given", "looks"), [
    (AZURE, "mooncake-jsonl", "azure-csv"),
    (AZURE, "jsonl", "azure-csv"),
    (b'{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n',
     "azure-csv", "mooncake-jsonl"),
    (b'{"arrival": "2026-11-29T00:00:00Z", "input_tokens": 1, "output_tokens": 1}\n',
     "mooncake-jsonl", "jsonl"),
    (b'{\n  "resourceSpans": []\n}\n', "jsonl", "otlp-json"),
])
def test_a_file_of_another_format_is_refused_naming_the_format_it_looks_like(
        tmp_path, data, given, looks):
    with pytest.raises(InvalidInput) as refused:
        rows_of(write(tmp_path, data), given, start=START)
    assert refused.value.field == "format"
    assert f"looks like {looks}, not {given}" in refused.value.message


def test_the_first_lines_decide_headers_and_a_few_bad_lines_aside(tmp_path):
    mooncake = (b"timestamp,input_length,output_length\n\nnot json\n"
                b'{"timestamp": 0, "input_length": 5, "output_length": 1}\n')
    facts, _rows = rows_of(write(tmp_path, mooncake), "mooncake-jsonl", start=START)
    assert (facts.records, facts.rejected, facts.stats.header_lines) == (2, 1, 1)
    with pytest.raises(InvalidInput) as refused:
        rows_of(write(tmp_path, b"hello\nworld\n"), "jsonl")
    assert refused.value.message.startswith(
        "The first 2 lines are not records of jsonl, nor of any other import format")


def keys(rows: list[Row | RowError]) -> list[bytes]:
    identity = RowIdentity()
    return [identity.row_key(r.content, r.arrival_ns).key for r in rows if isinstance(r, Row)]


def test_rows_are_identified_by_content_not_encoding_order_or_name(tmp_path):
    plain, plain_rows = rows_of(write(tmp_path, AZURE, "a.csv"))
    crlf = b"\xef\xbb\xbf" + AZURE.replace(b"\n", b"\r\n")
    other, other_rows = rows_of(write(tmp_path, gzip.compress(crlf), "b.bin"))
    assert other.rows_sha256 == plain.rows_sha256
    assert keys(other_rows) == keys(plain_rows)
    # The same rows in another order (rows of one instant keeping theirs) are the same import,
    # each row keeping its key.
    lines = AZURE.splitlines(keepends=True)
    reordered, reordered_rows = rows_of(write(tmp_path, b"".join([lines[0], *lines[:0:-1]])))
    assert reordered.rows_sha256 == plain.rows_sha256
    assert sorted(keys(reordered_rows)) == sorted(keys(plain_rows))


def test_identical_rows_are_told_apart_by_ordinal_and_a_changed_row_changes_alone(tmp_path):
    _, rows = rows_of(write(tmp_path, AZURE))
    first, second, third = keys(rows)
    assert rows[0].content == rows[1].content and first != second
    changed = AZURE.replace(b"3180,8", b"3180,9")
    facts, changed_rows = rows_of(write(tmp_path, changed))
    assert keys(changed_rows)[:2] == [first, second] and keys(changed_rows)[2] != third
    assert facts.rows_sha256 != rows_of(write(tmp_path, AZURE, "again.csv"))[0].rows_sha256


def test_a_stated_history_wins_and_no_continuing_session_needs_no_word():
    mixed = SessionEvidence(follow_ups=10, cumulative=5, incremental=5)
    assert decide_history("cumulative", mixed) == ("cumulative", None)
    assert decide_history(None, SessionEvidence()) == ("incremental", None)
    history, why = decide_history(None, SessionEvidence(follow_ups=4))
    assert history == "incremental" and "pass --session-history" in (why or "")


@pytest.mark.parametrize(("cumulative", "incremental", "expected"), [
    (100, 0, "cumulative"), (90, 10, "cumulative"), (3, 97, "incremental"), (0, 8, "incremental"),
    (89, 11, None), (50, 50, None)])
def test_the_evidence_decides_unless_it_is_mixed(cumulative, incremental, expected):
    evidence = SessionEvidence(cumulative + incremental, cumulative, incremental)
    if expected is None:
        with pytest.raises(InvalidInput) as refused:
            decide_history(None, evidence)
        assert refused.value.field == "session_history"
        assert f"{cumulative} of {cumulative + incremental}" in refused.value.message
    else:
        history, why = decide_history(None, evidence)
        assert history == expected and f"read as {expected}" in (why or "")


def test_cumulative_turns_are_stored_as_given_and_their_delays_follow_that_reading(tmp_path):
    # Each turn repeats the previous turn's blocks but its last (partial, filled by the reply).
    turns = [{"session_id": "a", "timestamp": 0, "input_length": 1000, "output_length": 10,
              "hash_ids": [1, 2]},
             {"session_id": "a", "delay": 100, "input_length": 1500, "output_length": 20,
              "hash_ids": [1, 3, 4]},
             {"session_id": "a", "delay": 100, "input_length": 2200, "output_length": 5,
              "hash_ids": [1, 3, 5, 6, 7]}]
    data = "".join(json.dumps(t) + "\n" for t in turns).encode()
    facts, rows = rows_of(write(tmp_path, data), "mooncake-jsonl", start=START)
    assert facts.options.session_history == "cumulative"
    assert "2 of 2 follow-up turns repeat" in (facts.history_reason or "")
    assert [r.fields["input_tokens"] for r in rows] == [1000, 1500, 2200]
    assert rows[2].fields["prefix_block_ids"] == [1, 3, 5, 6, 7]
    model = ServiceTimeModel()
    second = model.timing(1000, 10)[1] + 100
    third = second + model.timing(1500, 20)[1] + 100
    assert [r.arrival_ns for r in rows] == [0, round(second * 1e6), round(third * 1e6)]
    assert (facts.first_ns, facts.last_ns) == (0, rows[2].arrival_ns)
    stated, stated_rows = rows_of(write(tmp_path, data, "again.jsonl"), "mooncake-jsonl",
                                  start=START, session_history="incremental")
    assert stated.history_reason is None
    assert [r.fields["input_tokens"] for r in stated_rows] == [1000, 2510, 4730]
    assert stated.last_ns == stated_rows[2].arrival_ns > rows[2].arrival_ns


def test_ids_order_the_rows_of_one_millisecond_as_the_file_did(tmp_path):
    """Export -> import -> export gives the same file only if ties keep the file's order: the
    id follows the arrival's nanoseconds within its millisecond, then the file's order among
    rows of one instant, never the content's digest."""
    from infercrane.domain.importers import Placement, observation_id

    rows = [{"timestamp": t, "input_length": n, "output_length": 1}
            for t, n in [(0, 900), (0, 5), (0, 700), (0.5, 1), (0.25, 3), (1, 2)]]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    facts, read = rows_of(write(tmp_path, data), "mooncake-jsonl", start=START,
                          timestamp_unit="ms")
    placement = Placement(START, facts.first_ns, relative=True)
    identity = RowIdentity()
    ids = [observation_id("imp-x-", "d", identity.row_key(r.content, r.arrival_ns),
                          placement.placed_ns(r.arrival_ns)) for r in read]
    by_sort_key = sorted(range(len(ids)), key=lambda i: (placement.arrival_ms(read[i].arrival_ns),
                                                         ids[i]))
    assert [rows[i]["input_length"] for i in by_sort_key] == [900, 5, 700, 3, 1, 2]


class _Api:
    """Stands in for the service: records each batch body's size, accepts every item."""

    def __init__(self) -> None:
        self.bodies: list[int] = []

    def request(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(len(json.dumps(body)))
        n = len(body["items"])
        return {"accepted": n, "stored": n, "already_present": 0, "errors": []}


def test_rows_with_many_blocks_are_sent_in_bodies_under_the_limit(tmp_path):
    from infercrane.cli.capture import BATCH_BYTES, _send
    from infercrane.domain.importers import Placement

    # 200 turns of one cumulative session, growing to 1,800 blocks of 42-character ids: ~8 MB.
    rows, blocks = [], []
    for turn in range(200):
        blocks = blocks[:-1] + [f"{turn:04d}-{n}-" + "b" * 32 for n in range(10)]
        rows.append({"session_id": "one", "input_length": 512 * len(blocks), "output_length": 2,
                     "hash_ids": blocks, **({"timestamp": 0} if turn == 0 else {"delay": 5})})
    source = TraceInput(write(tmp_path, "".join(json.dumps(r) + "\n" for r in rows).encode()))
    facts = scan(source, ImportOptions("mooncake-jsonl", "d", start=START))
    api = _Api()
    sent = _send(api, source, facts.options, Placement(START, facts.first_ns, relative=True),
                 "imp-0000000000000000-", "mooncake-jsonl:sha256:" + "0" * 64, facts)
    assert sent["accepted"] == 200
    assert sum(api.bodies) > BATCH_BYTES and len(api.bodies) >= 2
    assert max(api.bodies) <= BATCH_BYTES


class _MeetingApi(_Api):
    """Holds each batch until `width` are in flight together, then a moment longer for one more
    to arrive: a sender posting fewer at once leaves `most` under `width` (each hold gives up after
    30 s), one posting more is seen in `most`."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self._width = width
        self._changed = threading.Condition()
        self.active = self.most = 0

    def request(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._changed:
            self.active += 1
            self.most = max(self.most, self.active)
            self._changed.notify_all()
            self._changed.wait_for(lambda: self.active >= self._width, timeout=30)
            # An over-eager sender posts its next batch within this wait (it parses 500 rows
            # in milliseconds); a correct one is blocked on an answer and never does.
            self._changed.wait_for(lambda: self.active > self._width, timeout=0.3)
        try:
            return super().request(method, path, body)
        finally:
            with self._changed:
                self.active -= 1
                self._changed.notify_all()


@pytest.mark.parametrize("in_flight", [1, 2, 5])
def test_an_import_posts_exactly_the_batches_in_flight_it_is_given(tmp_path, in_flight):
    from infercrane.cli.capture import _send
    from infercrane.domain.batch import MAX_BATCH
    from infercrane.domain.importers import Placement

    # in_flight x 3 full batches: every round of holds fills.
    n = MAX_BATCH * in_flight * 3
    csv = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:17:{i // 1000:02d}.{i % 1000:03d}0000,{100 + i},10\n" for i in range(n))
    source = TraceInput(write(tmp_path, csv.encode()))
    facts = scan(source, ImportOptions("azure-csv", "d"))
    api = _MeetingApi(in_flight)
    sent = _send(api, source, facts.options, Placement(None, facts.first_ns, relative=False),
                 "imp-0000000000000000-", "azure-csv:sha256:" + "0" * 64, facts, in_flight)
    source.close()
    assert sent["accepted"] == n
    assert (api.most, len(api.bodies)) == (in_flight, in_flight * 3)


def test_the_import_command_refuses_an_in_flight_outside_its_range(tmp_path):
    from click.testing import CliRunner

    from infercrane.cli.main import cli

    path = write(tmp_path, AZURE)
    for bad in ("0", "17"):
        result = CliRunner().invoke(cli, ["capture", "import", path, "--deployment", "d",
                                          "--format", "azure-csv", "--in-flight", bad])
        assert result.exit_code == 2 and "--in-flight" in result.output


@pytest.mark.parametrize("fmt", ["mooncake-jsonl", "jsonl"])
def test_a_non_finite_or_deeply_nested_row_is_rejected_alone(tmp_path, fmt):
    # NaN, Infinity and 1e400 are not JSON (the API would refuse a whole batch holding one), and
    # a row nested past the parser's depth is unreadable: each is that row's rejection, never a
    # traceback, and the good rows go on.
    good = ({"timestamp": 0, "input_length": 5, "output_length": 1} if fmt == "mooncake-jsonl"
            else {"arrival": "2026-11-29T00:00:00Z", "input_tokens": 5, "output_tokens": 1})
    lines = [json.dumps(good), '{"timestamp": NaN, "input_length": 5, "output_length": 1}',
             '{"input_tokens": Infinity}', '{"input_tokens": 1e400}', "[" * 100_000 + "]" * 100_000,
             json.dumps(good)]
    facts, rows = rows_of(write(tmp_path, "\n".join(lines).encode() + b"\n"), fmt, start=START)
    assert facts.records - facts.rejected == 2
    assert sum(isinstance(r, RowError) for r in rows) == 4
