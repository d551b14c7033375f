"""Identical input gives identical stored items, fingerprints and per-item outcomes, release to
release.

Oracle: `tests/fixtures/capture/prepare_golden.json`, recorded once with the implementation named
in its `about` (before the single-pass fast path), never with the code under test. A fingerprint
that drifted by one byte would make every re-sent named observation an `id_conflict` against data
already stored, and every re-sent unnamed one a duplicate; an outcome that drifted would change
the API. The cases cover gateway and Mooncake rows, imports with a timing model, number edge cases
(integral floats, exponents, 0.1 + 0.2), identities with controls, quotes and non-BMP characters,
offsets and microseconds in arrivals, one item per refusal and error code, and the queue's
pseudonym checks.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from infercrane.domain.capture import CaptureService
from infercrane.domain.tenancy import Keyring

GOLDEN = json.loads((Path(__file__).parents[1] / "fixtures" / "capture" / "prepare_golden.json")
                    .read_text())


class _Keyrings:
    ring = Keyring.from_document(GOLDEN["keyring"])

    def get(self, tenant: str) -> Keyring:
        return self.ring


def _stored(o: Any) -> dict[str, Any]:
    d = asdict(o)
    if d["prefix_block_ids"] is not None:
        d["prefix_block_ids"] = list(d["prefix_block_ids"])
    return d


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: c["identities"])
def test_prepare_gives_the_recorded_items_fingerprints_and_outcomes(case):
    now = datetime.fromisoformat(GOLDEN["now"])
    service = CaptureService(None, _Keyrings(), clock=lambda: now)  # type: ignore[arg-type]
    good, result = service.prepare("golden", case["items"], identities=case["identities"])
    assert result.to_document() == case["result"]
    assert len(good) == len(case["stored"])
    for got, want in zip(good, case["stored"], strict=True):
        assert _stored(got) == want
        # The same types too (850 == 850.0, but the store writes them as "850" and "850.0").
        assert {k: type(v) for k, v in _stored(got).items()} == {k: type(v) for k, v in want.items()}
    assert any(o.fingerprint for o in good)  # the named ids' fingerprints are compared too
