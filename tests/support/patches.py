"""Tests whose meaning depends on a guarded library patch (adapters/library_patches.py) skip when
that patch is skipped, saying which and why, rather than pass or fail for the wrong reason.

Skip, not xfail: against moto's unlocked writes a race test passes or fails by chance, so neither
an expected failure nor an unexpected pass would mean anything; against moto's own KMS Sign a
signature over a digest never verifies, which is moto's gap, not the code's. A skip with the
reason is the honest answer in both cases.
"""

from __future__ import annotations

import pytest

from infercrane.adapters.library_patches import mismatch

# Test module (path prefix, from the repository root) -> (library, what it needs from the patch).
NEEDS = {
    "tests/integration/test_races_": (
        "moto", "atomic conditional writes and transactions (local/moto_atomic.py)"),
    "tests/integration/test_signed_evidence": (
        "moto", "KMS Sign of a digest (local/kms.py)"),
    "tests/e2e/test_signed_evidence_e2e": (
        "moto", "KMS Sign of a digest (local/kms.py)"),
    "tests/e2e/test_local_enforcement": (
        "moto", "`denied:` lines naming the function (local/iam.py)"),
}


def skip_unpatched(items: list[pytest.Item]) -> None:
    reasons = {library: mismatch(library) for library, _ in NEEDS.values()}
    for item in items:
        for prefix, (library, what) in NEEDS.items():
            reason = reasons[library]
            if reason and item.nodeid.startswith(prefix):
                item.add_marker(pytest.mark.skip(reason=f"needs {what}, skipped here: {reason}"))
