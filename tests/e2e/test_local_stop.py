"""`infercrane local serve` stops on SIGTERM with exit 0 and leaves no process behind (its exit
skips the interpreter's final collection; the stop time itself is a bench figure)."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.e2e.conftest import start_served


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def test_sigterm_stops_the_stack_and_every_environment_with_exit_0(tmp_path):
    stack = start_served(tmp_path, "--no-schedules")
    try:
        done = stack.cli("capacity", "--window", "1h", "--output", "json")
        assert done.returncode == 0, done.stderr  # the API's and authorizer's environments ran
        environments = descendants(stack.process.pid)
        assert environments
    finally:
        stack.process.send_signal(signal.SIGTERM)
        code = stack.process.wait(timeout=60)
    assert code == 0
    assert not [pid for pid in environments if running(pid)], "processes left behind"


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
