"""`infercrane capture import` with files as users have them, through the CLI and the local stack:
compressed (gzip, bzip2, xz, zstd), piped, re-encoded (CRLF and a BOM), under the wrong
--format, and Mooncake sessions whose history is cumulative, mixed or one session long. Every
file is generated here from the vendored public traces."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import zstandard

from tests.e2e.conftest import BIN
from tests.e2e.test_capture_cli import partition

UNTIL = "2023-11-16T19:00:00Z"  # the Azure sample lies in the hour before
START = "2026-11-29T00:00:00Z"
COMPRESS = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress,
            "zst": lambda data: zstandard.ZstdCompressor().compress(data)}


def run(served: Any, *args: str, stdin: bytes | None = None) -> tuple[int, dict[str, Any] | None,
                                                                      str, int]:
    """(exit code, --output json document, stderr, peak RSS KiB) of one CLI process; `stdin`
    is written through a pipe, as `zcat f | infercrane ...` would."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile() as peak:
        # The CLI runs as a grandchild: Linux carries the parent's memory high-water mark into a
        # child's ru_maxrss at exec (the pytest worker's hundreds of MB), not into a grandchild's.
        proc = subprocess.Popen([sys.executable, "-c", _PEAK_RSS, peak.name, str(BIN), *args,
                                 "--output", "json"], env=served.env("demo"),
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=out, stderr=err)
        if proc.stdin is not None:
            with proc.stdin:
                proc.stdin.write(stdin or b"")
        proc.wait()
        out.seek(0)
        err.seek(0)
        text = out.read()
        return (proc.returncode, json.loads(text) if text.strip() else None,
                err.read().decode(), int(Path(peak.name).read_text()))


# argv: peak-file, command...: runs the command, writes its peak RSS (KiB), exits with its code.
_PEAK_RSS = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def azure_sample(shared_data: Path, rows: int = 300) -> bytes:
    with (shared_data / "azure_llm_inference_2023_code.csv").open("rb") as f:
        return b"".join(next(f) for _ in range(rows + 1))


def statistics(served: Any, deployment: str) -> dict[str, Any]:
    header = served.cli_json("replay", deployment, "--window", "2h", "--until", UNTIL,
                             "--max-requests", "1000")
    return header["statistics"]


def test_compressed_piped_and_re_encoded_rows_are_the_same_import_and_store_nothing_new(
        served, shared_data, tmp_path: Path):
    plain = azure_sample(shared_data)
    source = tmp_path / "azure-300.csv"
    source.write_bytes(plain)
    args = ("--deployment", "inputs-azure", "--format", "azure-csv")
    code, first, err, _ = run(served, "capture", "import", str(source), *args)
    assert code == 0, err
    assert (first["status"], first["stored"], first["compression"]) == ("new", 300, None)
    stored = partition(served, "demo", "inputs-azure")
    assert len(stored) == 300
    windows = plain.replace(b"\n", b"\r\n")
    bom = b"\xef\xbb\xbf" + windows
    for suffix, compress in COMPRESS.items():
        # Named as users misname them: the first bytes decide, not the name.
        path = tmp_path / f"azure-{suffix}.csv"
        path.write_bytes(compress(bom))
        code, again, err, _ = run(served, "capture", "import", str(path), *args)
        assert code == 0, err
        assert (again["status"], again["stored"], again["already_present"],
                again["compression"], again["rows_sha256"], again["import_id"]) == (
            "same", 0, 300, {"gz": "gzip", "bz2": "bzip2", "zst": "zstd"}.get(suffix, suffix),
            first["rows_sha256"], first["import_id"]), suffix
        assert "imported into inputs-azure before" in err
    code, piped, err, _ = run(served, "capture", "import", "-", *args, stdin=windows)
    assert code == 0, err
    assert (piped["status"], piped["stored"], piped["already_present"]) == ("same", 0, 300)
    assert "importing stdin" in err
    assert partition(served, "demo", "inputs-azure") == stored  # not even an ingest time changed


def test_a_compressed_re_encoded_pipe_gives_the_plain_files_statistics(served, shared_data,
                                                                      tmp_path: Path):
    plain = azure_sample(shared_data)
    source = tmp_path / "azure-300.csv"
    source.write_bytes(plain)
    code, _, err, _ = run(served, "capture", "import", str(source), "--deployment",
                          "inputs-plain", "--format", "azure-csv")
    assert code == 0, err
    zst = COMPRESS["zst"](b"\xef\xbb\xbf" + plain.replace(b"\n", b"\r\n"))
    code, doc, err, _ = run(served, "capture", "import", "/dev/stdin", "--deployment",
                            "inputs-zst", "--format", "azure-csv", stdin=zst)
    assert code == 0, err
    assert (doc["stored"], doc["rejected"], doc["compression"]) == (300, 0, "zstd")
    assert statistics(served, "inputs-zst") == statistics(served, "inputs-plain")


def test_a_file_under_another_format_is_refused_at_once_naming_its_format(served, shared_data,
                                                                         tmp_path: Path):
    azure = tmp_path / "azure.csv.gz"
    azure.write_bytes(gzip.compress(azure_sample(shared_data)))
    code, _, err, _ = run(served, "capture", "import", str(azure), "--deployment", "inputs-wrong",
                          "--format", "mooncake-jsonl", "--start", START)
    assert code == 2
    assert "looks like azure-csv" in err and "--format azure-csv" in err
    lines = (shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_bytes().splitlines()
    mooncake = tmp_path / "mooncake.jsonl"
    mooncake.write_bytes(b"\n".join(lines[:20]) + b"\n")
    code, _, err, _ = run(served, "capture", "import", str(mooncake), "--deployment",
                          "inputs-wrong", "--format", "azure-csv")
    assert code == 2
    assert "looks like mooncake-jsonl" in err
    assert partition(served, "demo", "inputs-wrong") == []
    assert "Traceback" not in err


def sessions(shared_data: Path, cumulative: bool, count: int = 20, turns: int = 4) -> bytes:
    """`count` sessions of `turns` turns from the vendored trace's first rows. Cumulative: each
    turn's hash_ids repeat the previous turn's but its last block, and its input_length holds the
    whole history; incremental: new blocks and new tokens only."""
    base = [json.loads(line) for line in
            (shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_text().splitlines()[
                :count * turns]]
    rows, fresh = [], 10_000_000
    for s in range(count):
        blocks: list[int] = []
        history = 0
        for t in range(turns):
            src = base[s * turns + t]
            new = list(range(fresh, fresh + 3))
            fresh += 3
            row: dict[str, Any] = {"session_id": f"s{s}", "output_length": src["output_length"]}
            if t == 0:
                row["timestamp"] = src["timestamp"]
            else:
                row["delay"] = 1000
            if cumulative:
                blocks = blocks[:-1] + new
                history += 1200
                row.update(input_length=history, hash_ids=blocks)
            else:
                row.update(input_length=1200, hash_ids=new)
            rows.append(row)
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def input_tokens(served: Any, deployment: str) -> list[int]:
    return sorted(o.input_tokens for o in partition(served, "demo", deployment))


def test_session_history_is_decided_from_the_file_said_on_stderr_and_mixed_is_refused(
        served, shared_data, tmp_path: Path):
    cumulative = tmp_path / "cumulative.jsonl"
    cumulative.write_bytes(sessions(shared_data, cumulative=True))
    args = ("--format", "mooncake-jsonl", "--start", START)
    code, doc, err, _ = run(served, "capture", "import", str(cumulative), "--deployment",
                            "inputs-cumulative", *args)
    assert code == 0, err
    assert "60 of 60 follow-up turns repeat the previous turn's hash_ids blocks" in err
    assert "read as cumulative" in err
    assert doc["session_history"] == "cumulative"
    # Stored as given: no history added twice (the file's largest input is 4 x 1,200 tokens).
    assert input_tokens(served, "inputs-cumulative") == sorted(
        json.loads(line)["input_length"] for line in cumulative.read_text().splitlines())
    incremental = sessions(shared_data, cumulative=False)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(cumulative.read_bytes() + incremental.replace(b'": "s', b'": "t'))
    code, _, err, _ = run(served, "capture", "import", str(mixed), "--deployment",
                          "inputs-mixed", *args)
    assert code == 2
    assert "Sessions are mixed: 60 of 120" in err and "--session-history" in err
    assert partition(served, "demo", "inputs-mixed") == []
    code, doc, err, _ = run(served, "capture", "import", str(mixed), "--deployment",
                            "inputs-mixed", *args, "--session-history", "incremental")
    assert code == 0, err
    assert (doc["stored"], doc["session_history"]) == (160, "incremental")
    assert "sessions:" not in err  # stated, so nothing to explain


def test_one_session_spanning_the_file_is_sent_across_requests_in_bounded_memory(
        served, tmp_path: Path):
    """300 turns of one cumulative session whose blocks grow to 1,200 long ids: ~11 MB of items,
    more than one request may carry. Read as incremental (the pathological reading: history
    added again, quadratic without a bound), the CLI's memory stays bounded too. Measured: 119 MiB
    peak either way (2026-12-03); the issue saw 1.1 GB before sessions were bounded."""
    rows, blocks = [], []
    for turn in range(300):
        blocks = blocks[:-1] + [f"{turn:04d}-{n}-" + "b" * 48 for n in range(5)]
        rows.append({"session_id": "one", "input_length": 512 * len(blocks),
                     "output_length": 20, "hash_ids": blocks,
                     **({"timestamp": 0} if turn == 0 else {"delay": 10})})
    path = tmp_path / "one-session.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    assert len(gzip.decompress(path.read_bytes())) > 10_000_000
    args = ("capture", "import", str(path), "--format", "mooncake-jsonl", "--start", START)
    code, doc, err, rss = run(served, *args, "--deployment", "inputs-one-session")
    assert code == 0, err
    assert (doc["stored"], doc["session_history"]) == (300, "cumulative")
    assert rss < 200 * 1024, rss
    code, doc, err, rss = run(served, *args, "--deployment", "inputs-one-session-b",
                              "--session-history", "incremental")
    assert rss < 200 * 1024, rss
    # Read as incremental, the swollen turns' modelled latencies put the last arrivals weeks past
    # the start: the check pass finds it and the service refuses the import before any row is
    # sent (had it started in the past, ~11 MB of turns over the 4,096-block limit would be sent
    # to be refused row by row, a minute of the work bucket's pacing).
    assert code == 2, err
    assert "outside the accepted time range" in err and "last_arrival" in err, err
    assert "Traceback" not in err
