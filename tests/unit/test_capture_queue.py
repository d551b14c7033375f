"""The queue path: edge signing, verification, and what is consumed versus retried."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from infercrane.domain.capture import CaptureService, QueueMessage
from infercrane.domain.identity import is_pseudonym
from infercrane.edge import EdgeSigner
from infercrane.errors import DependencyUnavailable
from tests.unit.test_capture_domain import MemoryKeyrings, MemoryStore, item

CANARY = "CANARY-queue-51aa"
NOW = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)


def setup() -> tuple[CaptureService, MemoryStore, MemoryKeyrings, EdgeSigner]:
    store, rings = MemoryStore(), MemoryKeyrings("demo", "other")
    return CaptureService(store, rings, clock=lambda: NOW), store, rings, EdgeSigner(rings.get("demo"))


def as_message(mid: str, kwargs: dict) -> QueueMessage:
    return QueueMessage(mid, kwargs["MessageBody"],
                        {k: v["StringValue"] for k, v in kwargs["MessageAttributes"].items()})


def test_edge_helper_hmacs_identities_so_raw_ids_never_leave_the_tenant():
    _, _, _, signer = setup()
    obs = signer.observation(**item(session_id=CANARY, prefix_block_ids=[1, 2], prefix_block_size=512))
    msg = signer.message([obs])
    assert CANARY not in json.dumps(msg)
    assert is_pseudonym(obs["session_id"])
    assert all(is_pseudonym(b) for b in obs["prefix_block_ids"])


def test_signed_message_is_stored_in_one_write_with_edge_pseudonyms():
    capture, store, _, signer = setup()
    intake = capture.queue_intake()
    for n in range(3):
        obs = signer.observation(**item(observation_id=f"gw-{n}", session_id="s-1"))
        assert intake.accept(as_message(f"m{n}", signer.message([obs]))) == "accepted"
    retry, stats = intake.commit()
    assert retry == []
    assert stats.items == 3
    assert stats.requests == 1
    assert {o.session_id for o in store.items.values()} == {signer.pseudonymize("s-1")}


@pytest.mark.parametrize("tamper", ["unsigned", "bad_signature", "other_tenant", "unknown_tenant"])
def test_unverifiable_messages_are_consumed_and_counted_not_stored(tamper):
    capture, store, _rings, signer = setup()
    kwargs = signer.message([signer.observation(**item())])
    attrs = {k: v["StringValue"] for k, v in kwargs["MessageAttributes"].items()}
    body = kwargs["MessageBody"]
    if tamper == "unsigned":
        attrs.pop("signature")
    elif tamper == "bad_signature":
        body = body.replace('"input_tokens":812', '"input_tokens":813')
    elif tamper == "other_tenant":
        attrs["tenant"] = "other"  # demo's signature does not verify under other's key
    else:
        attrs["tenant"] = "ghost"
    intake = capture.queue_intake()
    verdict = intake.accept(QueueMessage("m1", body, attrs))
    expected = {"other_tenant": "bad_signature"}.get(tamper, tamper)
    assert verdict == expected
    assert intake.verdicts[expected] == 1
    assert intake.commit()[0] == []
    assert not store.items


def test_message_carrying_a_body_is_consumed_and_rejected_whole():
    capture, store, _, signer = setup()
    kwargs = signer.message([signer.observation(**item(observation_id="fine")),
                             {**signer.observation(**item()), "prompt": CANARY}])
    intake = capture.queue_intake()
    assert intake.accept(as_message("m1", kwargs)) == "body_field"
    assert intake.items["rejected"] == 2
    assert not store.items


def test_message_carrying_a_raw_identity_is_consumed_and_rejected_whole():
    capture, store, _, signer = setup()
    kwargs = signer.message([{**signer.observation(**item(observation_id="raw")), "session_id": CANARY},
                             signer.observation(**item(observation_id="ok", session_id="s"))])
    intake = capture.queue_intake()
    assert intake.accept(as_message("m1", kwargs)) == "raw_identity"
    assert intake.commit()[0] == []
    assert not store.items


def test_unknown_key_versions_are_rejected_per_item():
    capture, store, _, signer = setup()
    kwargs = signer.message([{**signer.observation(**item(observation_id="old")),
                              "session_id": "v7:" + "a" * 64},
                             signer.observation(**item(observation_id="ok", session_id="s"))])
    intake = capture.queue_intake()
    assert intake.accept(as_message("m1", kwargs)) == "accepted"
    intake.commit()
    assert intake.items["rejected_unknown_key_version"] == 1
    assert [o.observation_id for o in store.items.values()] == ["ok"]


class FailingStore(MemoryStore):
    def put_many(self, observations):
        raise DependencyUnavailable("The observation store is unavailable.")


def test_a_store_outage_retries_exactly_the_messages_that_had_observations():
    store, rings = FailingStore(), MemoryKeyrings("demo")
    capture, signer = CaptureService(store, rings, clock=lambda: NOW), EdgeSigner(rings.get("demo"))
    intake = capture.queue_intake()
    intake.accept(as_message("good", signer.message([signer.observation(**item())])))
    intake.accept(QueueMessage("unsigned", "{}", {}))
    assert intake.commit()[0] == ["good"]


class DownKeyrings(MemoryKeyrings):
    def get(self, tenant):
        raise DependencyUnavailable("Secrets Manager is unavailable.")


def test_only_clean_messages_can_be_retried_when_keys_are_unavailable():
    rings = MemoryKeyrings("demo")
    signer = EdgeSigner(rings.get("demo"))
    capture = CaptureService(MemoryStore(), DownKeyrings(), clock=lambda: NOW)
    intake = capture.queue_intake()
    dirty = signer.message([{**signer.observation(**item()), "content": CANARY}])
    assert intake.accept(as_message("dirty", dirty)) == "body_field"
    with pytest.raises(DependencyUnavailable):
        intake.accept(as_message("clean", signer.message([signer.observation(**item())])))


def test_prompt_message_nested_ten_thousand_deep_is_consumed_not_retried():
    capture, store, _, signer = setup()
    body = '{"prompt": ' + "[" * 10_000 + json.dumps(CANARY) + "]" * 10_000 + "}"
    kwargs = signer.message([signer.observation(**item())])
    attrs = {k: v["StringValue"] for k, v in kwargs["MessageAttributes"].items()}
    intake = capture.queue_intake()
    assert intake.accept(QueueMessage("deep", body, attrs)) == "malformed"
    assert intake.commit()[0] == []
    assert intake.verdicts == {"malformed": 1}
    assert not store.items


@pytest.mark.parametrize("signature", ["é" * 64, "☃", "\udcff" * 64, ""])
def test_non_ascii_signature_is_consumed_as_a_bad_signature(signature):
    capture, store, _, signer = setup()
    kwargs = signer.message([signer.observation(**item())])
    attrs = {k: v["StringValue"] for k, v in kwargs["MessageAttributes"].items()}
    attrs["signature"] = signature
    intake = capture.queue_intake()
    verdict = intake.accept(QueueMessage("m1", kwargs["MessageBody"], attrs))
    assert verdict == ("unsigned" if not signature else "bad_signature")
    assert intake.commit()[0] == []
    assert not store.items


class BrokenKeyrings(MemoryKeyrings):
    def get(self, tenant):
        raise TypeError(CANARY)  # a bug, not an outage: no retry can fix it


def test_a_message_that_fails_for_any_non_transient_reason_is_consumed_and_logged_by_id(caplog):
    rings = MemoryKeyrings("demo")
    signer = EdgeSigner(rings.get("demo"))
    capture = CaptureService(MemoryStore(), BrokenKeyrings(), clock=lambda: NOW)
    intake = capture.queue_intake()
    caplog.set_level("DEBUG")
    assert intake.accept(as_message("m-broken", signer.message([signer.observation(**item())]))) \
        == "unreadable"
    assert intake.verdicts == {"unreadable": 1}
    assert "m-broken" in caplog.text
    assert CANARY not in caplog.text


class RefusingStore(MemoryStore):
    """Refuses every observation of one id, as the store does for an id naming other content."""

    def put_many(self, observations):
        from infercrane.ports.observations import WriteStats

        keep = [o for o in observations if o.observation_id != "taken"]
        stats = super().put_many(keep)
        refused = {i: "id_conflict" for i, o in enumerate(observations)
                   if o.observation_id == "taken"}
        return WriteStats(stats.items, stats.requests, 0, refused=refused)


def test_items_the_store_refuses_are_counted_and_never_retried():
    store, rings = RefusingStore(), MemoryKeyrings("demo")
    capture, signer = CaptureService(store, rings, clock=lambda: NOW), EdgeSigner(rings.get("demo"))
    intake = capture.queue_intake()
    intake.accept(as_message("m1", signer.message([signer.observation(**item(observation_id="taken")),
                                                   signer.observation(**item(observation_id="new"))])))
    retry, _ = intake.commit()
    assert retry == []
    assert (intake.items["accepted"], intake.items["rejected_id_conflict"]) == (1, 1)
    assert [o.observation_id for o in store.items.values()] == ["new"]


def test_an_empty_block_list_as_the_only_identity_is_stored_without_a_key_version():
    # No identity was made with a key, so there is no version to record (this used to raise
    # StopIteration and consume the message as unreadable).
    capture, store, _, signer = setup()
    obs = signer.observation(**item(observation_id="gw-empty", prefix_block_ids=[],
                                    prefix_block_size=512))
    intake = capture.queue_intake()
    assert intake.accept(as_message("m1", signer.message([obs]))) == "accepted"
    assert intake.commit()[0] == []
    (stored,) = store.items.values()
    assert stored.prefix_block_ids == () and stored.key_version is None
