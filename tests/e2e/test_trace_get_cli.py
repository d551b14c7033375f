"""Getting traces out as a user: `trace get`, `trace export`, digest prefixes, full digests in
`trace list`, and sessions that survive export -> import through the local stack."""

from __future__ import annotations

import json
from pathlib import Path

START = "2026-11-02T00:00:00Z"
UNTIL = "2026-11-02T01:00:00Z"


def two_sessions(shared_data: Path) -> str:
    """The vendored Mooncake trace's first rows, split between two sessions."""
    base = [json.loads(line) for line in
            (shared_data / "mooncake_fast25_synthetic_trace.jsonl").read_text().splitlines()[:8]]
    rows = [{**row, "session_id": "alpha" if n % 2 == 0 else "beta",
             "input_length": 150 + 25 * n, "hash_ids": row["hash_ids"][:1]}
            for n, row in enumerate(base)]
    return "".join(json.dumps(r) + "\n" for r in rows)


def import_and_replay(served, path: Path, deployment: str) -> dict:
    done = served.cli("capture", "import", str(path), "--deployment", deployment, "--format",
                      "mooncake-jsonl", "--start", START, "--output", "json")
    assert done.returncode == 0, done.stderr
    return served.cli_json("replay", deployment, "--window", "1h", "--until", UNTIL)


def test_get_export_by_prefix_and_sessions_survive_a_round_trip(served, shared_data, tmp_path):
    source = tmp_path / "sessions.jsonl"
    source.write_text(two_sessions(shared_data))
    header = import_and_replay(served, source, "e2e-sessions")
    assert header["statistics"]["sessions"] == 2
    digest = header["digest"]

    listed = served.cli_json("trace", "list", "e2e-sessions")
    assert [h["digest"] for h in listed["traces"]] == [digest]
    table = served.cli("trace", "list", "e2e-sessions")
    assert digest in table.stdout.replace("\n", "").replace("│", "").replace(" ", "")
    assert "…" not in table.stdout

    saved = tmp_path / "trace.json"
    got = served.cli("trace", "get", digest[7:19], "--save", str(saved))
    assert got.returncode == 0, got.stderr
    assert json.loads(saved.read_text())["digest"] == digest
    # Saved with its signed attestation beside it: verifies offline, without an API key.
    verified = served.cli("trace", "verify", str(saved), tenant=None)
    assert verified.returncode == 0, verified.stderr
    assert served.cli_json("trace", "show", digest[:13])["digest"] == digest

    exported = tmp_path / "export.jsonl"
    done = served.cli("trace", "export", digest[:13], "--format", "mooncake", "--save",
                      str(exported))
    assert done.returncode == 0, done.stderr
    assert (f"aiperf profile --model <model> --url <url> --endpoint-type chat --streaming "
            f"--input-file {exported} --custom-dataset-type mooncake_trace --fixed-schedule"
            in done.stderr)
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    assert {r.get("session_id") for r in rows} == {"s1", "s2"}
    checked = served.cli("trace", "verify", str(exported), tenant=None)
    assert checked.returncode == 0, checked.stderr

    again = import_and_replay(served, exported, "e2e-sessions-again")
    for name in ("input_tokens", "output_tokens", "sessions", "block_repeat_ratio"):
        assert again["statistics"][name] == header["statistics"][name], name
    stdout = served.cli("trace", "export", again["digest"])
    assert stdout.returncode == 0
    assert stdout.stdout == exported.read_text()


def test_unknown_short_and_foreign_prefixes_are_clear_errors(served, shared_data, tmp_path):
    source = tmp_path / "one.jsonl"
    source.write_text(two_sessions(shared_data))
    header = import_and_replay(served, source, "e2e-prefix")
    short = served.cli("trace", "get", header["digest"][7:10])
    assert short.returncode == 2
    assert "at least" in short.stderr
    other = served.cli("trace", "get", header["digest"][:13], tenant="other")
    assert other.returncode == 4
    unknown = served.cli("trace", "show", "sha256:" + "0" * 12)
    assert unknown.returncode == 4
