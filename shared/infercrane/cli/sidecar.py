"""Writing a signed file with its attestation beside it (`<file>.intoto.jsonl`).

Shared by `replay`, `trace` and `trace compare`, which each save signed files; its own module so
that those command modules need not import each other (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from infercrane.cli.client import CliError
from infercrane.cli.verify import SIDECAR_SUFFIX, sidecar_line
from infercrane.domain.attestation import subject_sha256


def save_signed_export(api: Any, digest: str, path: Path, exported: bytes) -> None:
    """Write an AIPerf export and, beside it, the service's signed attestation of it."""
    path.write_bytes(exported)
    envelope = api.request("GET", f"/v1/traces/{digest}/aiperf-attestation",
                           params={"name": path.name})
    statement = json.loads(base64.b64decode(envelope["payload"]))
    if subject_sha256(statement) != hashlib.sha256(exported).hexdigest():
        # The service derives the export from its own copy; a mismatch means this CLI's
        # exporter differs from the service's, and the file must not look signed.
        raise CliError("The service signed a different export than this CLI wrote (versions "
                       f"differ?); {path} is unsigned.", 1)
    write_sidecar(path, envelope)


def write_sidecar(path: Path, envelope: dict[str, Any]) -> None:
    path.with_name(path.name + SIDECAR_SUFFIX).write_text(sidecar_line(envelope),
                                                          encoding="utf-8")
