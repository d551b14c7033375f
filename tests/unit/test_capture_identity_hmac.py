"""Pseudonyms and fingerprints are HMAC-SHA256, byte for byte, whichever way they are computed.

Oracle: the standard library's `hmac` (RFC 2104 through OpenSSL), never identity.py's own code.
A pseudonym that drifted would unlink every session from its earlier turns; a fingerprint that
drifted would make re-sent observations conflicts.
"""

from __future__ import annotations

import hashlib
import hmac

from hypothesis import given, settings
from hypothesis import strategies as st

from infercrane.domain.identity import (
    KeyedHmac,
    fingerprint_key,
    fingerprinter,
    pseudonymize,
    pseudonymizer,
)
from infercrane.domain.tenancy import Keyring, KeySet
from infercrane.edge import EdgeSigner

# Keys shorter than, equal to and longer than SHA-256's 64-byte block (a long key is hashed).
keys = st.one_of(st.binary(max_size=200), st.binary(min_size=63, max_size=65))


@settings(max_examples=300, deadline=None)
@given(key=keys, messages=st.lists(st.binary(max_size=300), min_size=1, max_size=4))
def test_keyed_hmac_is_the_stdlib_hmac_for_every_message(key, messages):
    mac = KeyedHmac(key)
    for message in messages:  # one keyed state serves many messages, none leaking into the next
        assert mac.hexdigest(message) == hmac.new(key, message, hashlib.sha256).hexdigest()


@settings(max_examples=100, deadline=None)
@given(raw=st.text(max_size=80), content=st.binary(max_size=200))
def test_pseudonyms_and_fingerprints_are_hmacs_under_the_tenant_keys(raw, content):
    keys = KeySet("v2", {"v1": b"\x01" * 32, "v2": b"\x02" * 32})
    expected = hmac.new(b"\x02" * 32, raw.encode("utf-8"), hashlib.sha256).hexdigest()
    assert pseudonymize(raw, keys) == pseudonymizer(keys)(raw) == "v2:" + expected
    old = hmac.new(b"\x01" * 32, raw.encode("utf-8"), hashlib.sha256).hexdigest()
    assert pseudonymizer(keys, "v1")(raw) == "v1:" + old
    subkey = hmac.new(b"\x01" * 32, b"infercrane/observation-fingerprint/v1", "sha256").digest()
    assert fingerprint_key(keys) == subkey
    want = hmac.new(subkey, content, hashlib.sha256).hexdigest()
    assert fingerprinter(keys)(content) == want


@settings(max_examples=100, deadline=None)
@given(raws=st.lists(st.one_of(st.text(max_size=80), st.integers()), min_size=1, max_size=5))
def test_the_edge_pseudonymizes_each_id_as_the_stdlib_hmac_under_the_current_key(raws):
    identity = KeySet("v2", {"v1": b"\x01" * 32, "v2": b"\x02" * 32})
    signer = EdgeSigner(Keyring("demo", identity, KeySet.fresh()))
    for raw in raws:  # one signer, many ids: each is the HMAC of its own text only
        expected = hmac.new(b"\x02" * 32, str(raw).encode("utf-8"), hashlib.sha256).hexdigest()
        assert signer.pseudonymize(raw) == "v2:" + expected
