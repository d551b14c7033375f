"""The edge helper: what a gateway runs so raw identities never leave the tenant.

A gateway holds its tenant's keyring (the Secrets Manager secret `<prefix>/tenants/<tenant>`,
readable only by that tenant's gateway role). For each inference request it builds an observation
whose identities are already HMACs, and sends it to the capture queue signed with the tenant's
ingest key. No SDK here: `message()` returns the keyword arguments for SQS `send_message`.

    signer = EdgeSigner.from_secret(secret_string)
    obs = signer.observation(deployment="coder-production", arrival="2026-11-29T20:38:00.123Z",
                             input_tokens=812, output_tokens=96, latency_ms=1840.5,
                             session_id=raw_conversation_id)
    sqs.send_message(QueueUrl=capture_queue_url, **signer.message([obs]))
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from infercrane.domain import signing
from infercrane.domain.batch import MAX_BATCH
from infercrane.domain.identity import pseudonymizer
from infercrane.domain.tenancy import Keyring

IDENTITY_KEYS = ("session_id", "parent_session_id", "shared_prefix_id")
MAX_MESSAGE_BYTES = 256 * 1024


@dataclass(frozen=True)
class EdgeSigner:
    keyring: Keyring

    @classmethod
    def from_secret(cls, secret_string: str) -> EdgeSigner:
        return cls(Keyring.from_document(json.loads(secret_string)))

    @property
    def tenant(self) -> str:
        return self.keyring.tenant

    @cached_property
    def _pseudonym(self) -> Callable[[str], str]:
        # Keyed once per signer, not once per id: a gateway pseudonymizes every identity and
        # prefix block of every request, and keying an HMAC costs about as much as using it.
        return pseudonymizer(self.keyring.identity)

    def pseudonymize(self, raw: str | int) -> str:
        return self._pseudonym(str(raw))

    def observation(self, **fields: Any) -> dict[str, Any]:
        """An observation with its identities (and prefix blocks) replaced by HMACs."""
        out = {k: v for k, v in fields.items() if v is not None}
        for key in IDENTITY_KEYS:
            if key in out:
                out[key] = self.pseudonymize(out[key])
        if "prefix_block_ids" in out:
            out["prefix_block_ids"] = [self.pseudonymize(b) for b in out["prefix_block_ids"]]
        if "arrival" in out and not isinstance(out["arrival"], str):
            from infercrane.clock import rfc3339

            out["arrival"] = rfc3339(out["arrival"])
        return out

    def message(self, observations: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        """`send_message` keyword arguments: the body and its signature attributes."""
        items = list(observations)
        if not 1 <= len(items) <= MAX_BATCH:
            raise ValueError(f"A message carries 1 to {MAX_BATCH} observations.")
        body = json.dumps({"items": items}, separators=(",", ":"), sort_keys=True)
        if len(body.encode()) > MAX_MESSAGE_BYTES:
            raise ValueError("The message exceeds SQS's 256 KB; send fewer observations.")
        version, signature = signing.sign(body, self.keyring.ingest)
        return {"MessageBody": body, "MessageAttributes": {
            signing.ATTR_TENANT: {"DataType": "String", "StringValue": self.tenant},
            signing.ATTR_KEY_VERSION: {"DataType": "String", "StringValue": version},
            signing.ATTR_SIGNATURE: {"DataType": "String", "StringValue": signature},
        }}
