"""Port: the service's signing key (an asymmetric AWS KMS key in production)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class EvidenceSigner(Protocol):
    def sign(self, statement: Mapping[str, Any]) -> dict[str, Any]:
        """The DSSE envelope (its JSON form) of an in-toto statement, signed with the key."""

    def public_key_pem(self) -> str:
        """The key's public half, PEM (SubjectPublicKeyInfo)."""

    def key_id(self) -> str:
        """The key id envelopes name in their signatures."""
