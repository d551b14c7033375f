"""The evidence document of a qualification run.

Everything that identifies what was proven (the commit, the package version, each promise's
checks and verdicts, fixed facts such as the digest of the qualification window) is digested;
everything that differs between two runs of the same commit (times, endpoints, ports, random keys,
diagnostics) lives under `build`, which the digest leaves out — the same rule as trace documents.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infercrane import __version__
from infercrane.qualify.core import PromiseResult

SCHEMA = "infercrane.qualification/v1"
VOLATILE = ("digest", "build")


def git_commit(cwd: Path | None = None) -> str:
    """`git rev-parse HEAD` of the checkout holding this package, or "unknown" outside one."""
    where = cwd or Path(__file__).resolve().parent
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True,  # noqa: S607
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) == 40 else "unknown"


def canonical_digest(document: Mapping[str, Any]) -> str:
    """`sha256:` + hex SHA-256 of the RFC 8785 form of the document without its volatile parts."""
    import rfc8785

    content = {k: v for k, v in document.items() if k not in VOLATILE}
    return "sha256:" + hashlib.sha256(rfc8785.dumps(content)).hexdigest()


def evidence_document(results: Sequence[PromiseResult], evidence_class: str,
                      build: Mapping[str, Any], commit: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "evidence_class": evidence_class,
        "package": {"name": "infercrane", "version": __version__},
        "commit": commit if commit is not None else git_commit(),
        "ok": bool(results) and all(r.ok for r in results),
        "promises": [r.to_evidence() for r in results],
    }
    doc["build"] = {**build, "diagnostics": {
        r.promise: [{"check": c.name, "detail": c.detail} for c in r.failures(50)]
        for r in results if not r.ok}}
    doc["digest"] = canonical_digest(doc)
    return doc


def verify(document: Mapping[str, Any]) -> bool:
    return document.get("digest") == canonical_digest(document)


def write(document: Mapping[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return path
