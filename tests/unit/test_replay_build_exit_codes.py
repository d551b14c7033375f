"""`replay` exits for a failed asynchronous build as it would for the synchronous answer."""

from __future__ import annotations

from typing import Any

import pytest

from infercrane.cli import replay
from infercrane.cli.client import CliError


class _Api:
    def __init__(self, error: dict[str, Any]):
        self.error = error

    def request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        return {"status": "failed", "error": self.error, "records_read": 0}


@pytest.mark.parametrize(("code", "exit_code"), [("not_found", 4), ("invalid_input", 2),
                                                 ("internal", 1)])
def test_a_failed_build_exits_as_its_synchronous_answer_would(monkeypatch, code, exit_code):
    monkeypatch.setattr(replay, "POLL_INTERVAL_S", 0)
    accepted = {"build_id": "b" * 32, "status": "queued", "max_requests": 20_000,
                "status_path": "/v1/trace-builds/" + "b" * 32}
    with pytest.raises(CliError) as failed:
        replay.wait_for_build(_Api({"code": code, "message": "m"}), accepted)
    assert failed.value.exit_code == exit_code
