"""The stored shape of one inference request: what capture writes and replay traces read.

Only shapes are kept: times, token counts, outcome, and identities that are already tenant-secret
HMACs of the form `<key version>:<64 hex>` (e.g. `v1:3f2a...`). There is no field for a body.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import repeat
from typing import Literal, TypedDict

Outcome = Literal["ok", "client_error", "server_error", "timeout", "cancelled"]
Source = Literal["captured", "imported"]
TimingSource = Literal["observed", "modeled"]


@dataclass(frozen=True)
class StoredObservation:
    tenant: str
    deployment: str
    observation_id: str
    arrival_ms: int  # epoch milliseconds, UTC, truncated
    input_tokens: int
    output_tokens: int
    latency_ms: float
    outcome: Outcome
    streaming: bool
    sampling_rate: float
    source: Source
    ingested_at_ms: int
    revision: str | None = None
    cached_input_tokens: int | None = None
    ttft_ms: float | None = None
    provenance: str | None = None  # e.g. "azure-csv:sha256:<file digest>" for imports
    timing_source: TimingSource = "observed"
    timing_model: str | None = None  # canonical JSON of the service-time model's parameters
    session_id: str | None = None  # "<key version>:<hex>" HMACs only, never raw ids
    parent_session_id: str | None = None
    shared_prefix_id: str | None = None
    prefix_block_ids: tuple[str, ...] | None = None
    prefix_block_size: int | None = None
    key_version: str | None = None  # identity key version used for every HMAC above
    # Only for an id the client chose: the content's fingerprint (HMAC under the tenant's
    # non-rotating fingerprint key, domain/identity.py). The store refuses the same id with
    # another fingerprint. A derived id ("h-...") is its own fingerprint, so it needs none.
    fingerprint: str | None = None

    @property
    def sort_key(self) -> str:
        """(arrival, id) order as a string: the DynamoDB range key."""
        # `f"{arrival_ms:013d}#{id}"` (the same text, signs included) at half the cost: the
        # store asks for every observation's key several times per write.
        return str(self.arrival_ms).zfill(13) + "#" + self.observation_id

    @classmethod
    def from_fields(cls, values: StoredFields) -> StoredObservation:
        """The observation `cls(**values)` makes, without the generated `__init__`: a frozen
        dataclass's sets each of its 25 fields through `object.__setattr__`, which was a tenth of
        capture's CPU per observation (make bench, group `capture`). `values` names every field
        exactly, defaults included: `StoredFields` makes mypy check that of each dict literal,
        and a unit test holds it to the dataclass's fields. `values` becomes the instance's own
        dict (no copy): pass a fresh dict and keep no reference to it."""
        obs = object.__new__(cls)
        object.__setattr__(obs, "__dict__", values)  # the dict itself: no copy
        return obs

    @classmethod
    def from_fields_many(cls, values: list[StoredFields]) -> list[StoredObservation]:
        """`[from_fields(v) for v in values]` in C-level loops, no Python call per observation:
        a trace build makes 100,000 at a time (the call was a tenth of a read's decode)."""
        made = list(map(object.__new__, repeat(cls, len(values))))
        deque(map(object.__setattr__, made, repeat("__dict__"), values), maxlen=0)
        return made


class StoredFields(TypedDict):
    """Every field of `StoredObservation`, for `from_fields`."""

    tenant: str
    deployment: str
    observation_id: str
    arrival_ms: int
    input_tokens: int
    output_tokens: int
    latency_ms: float
    outcome: Outcome
    streaming: bool
    sampling_rate: float
    source: Source
    ingested_at_ms: int
    revision: str | None
    cached_input_tokens: int | None
    ttft_ms: float | None
    provenance: str | None
    timing_source: TimingSource
    timing_model: str | None
    session_id: str | None
    parent_session_id: str | None
    shared_prefix_id: str | None
    prefix_block_ids: tuple[str, ...] | None
    prefix_block_size: int | None
    key_version: str | None
    fingerprint: str | None


# Why the store refused one observation (a reason of the item's own: re-sending it cannot help).
# Capture reports them by index in its 200 response: (field, message) per code, never a value.
ID_CONFLICT = "id_conflict"
ITEM_UNSTORABLE = "item_unstorable"
STORE_REFUSALS: dict[str, tuple[str | None, str]] = {
    ID_CONFLICT: ("observation_id", "This observation_id already names an observation with "
                  "other content; an id names one observation."),
    ITEM_UNSTORABLE: (None, "The store refused this observation (for example over its item size "
                      "limit); the other items were stored."),
}
