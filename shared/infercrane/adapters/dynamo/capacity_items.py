"""The capacity item: its pynamodb model (the schema of every item kind of CapacityTable and its
index `gsi1`; layouts in capacity.py) and the mapping of an attempt to and from its item."""

from __future__ import annotations

from pynamodb.attributes import BooleanAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model

from infercrane.domain.capacity import StoredAttempt, hour_key


class Gsi1(GlobalSecondaryIndex["CapacityItem"]):
    class Meta:
        index_name = "gsi1"
        projection = AllProjection()

    gsi1pk = UnicodeAttribute(hash_key=True)
    gsi1sk = UnicodeAttribute(range_key=True)


class CapacityItem(Model):
    class Meta:
        table_name = "unbound"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    gsi1pk = UnicodeAttribute(null=True)
    gsi1sk = UnicodeAttribute(null=True)
    gsi1 = Gsi1()
    tenant = UnicodeAttribute()
    kind = UnicodeAttribute()  # attempt | dirty | rollup
    # attempt
    attempt_id = UnicodeAttribute(null=True)
    deployment = UnicodeAttribute(null=True)
    operation = UnicodeAttribute(null=True)
    adapter = UnicodeAttribute(null=True)
    runtime = UnicodeAttribute(null=True)
    compute_mode = UnicodeAttribute(null=True)
    region = UnicodeAttribute(null=True)
    zone = UnicodeAttribute(null=True)
    gpu = UnicodeAttribute(null=True)
    gpu_count = NumberAttribute(null=True)
    started_at_ms = NumberAttribute(null=True)
    finished_at_ms = NumberAttribute(null=True)
    outcome = UnicodeAttribute(null=True)
    error_code = UnicodeAttribute(null=True)
    error_message = UnicodeAttribute(null=True)
    received_at_ms = NumberAttribute(null=True)
    failure_class = UnicodeAttribute(null=True)
    persistent = BooleanAttribute(null=True)
    rule = UnicodeAttribute(null=True)
    classifier_version = UnicodeAttribute(null=True)
    # dirty marker
    token = UnicodeAttribute(null=True)
    dirty_at_ms = NumberAttribute(null=True)
    rolled = BooleanAttribute(null=True)
    # rollup
    hour = UnicodeAttribute(null=True)
    day = UnicodeAttribute(null=True)
    part = NumberAttribute(null=True)
    parts = NumberAttribute(null=True)
    groups = UnicodeAttribute(null=True)  # compact JSON: a list of group documents


def attempt_item(model: type[CapacityItem], a: StoredAttempt) -> CapacityItem:
    """The attempt as an item of `model` (the item class bound to the table)."""
    return model(
        f"{a.tenant}#ATTEMPT#{a.attempt_id}", "A", kind="attempt", tenant=a.tenant,
        gsi1pk=f"{a.tenant}#HOUR#{hour_key(a.hour)}", gsi1sk=a.attempt_id,
        attempt_id=a.attempt_id, deployment=a.deployment, operation=a.operation,
        adapter=a.adapter, runtime=a.runtime, compute_mode=a.compute_mode, region=a.region,
        zone=a.zone, gpu=a.gpu, gpu_count=a.gpu_count, started_at_ms=a.started_at_ms,
        finished_at_ms=a.finished_at_ms, outcome=a.outcome, error_code=a.error_code,
        error_message=a.error_message, received_at_ms=a.received_at_ms,
        failure_class=a.failure_class, persistent=a.persistent, rule=a.rule,
        classifier_version=a.classifier_version)


def stored_attempt(i: CapacityItem) -> StoredAttempt:
    return StoredAttempt(
        tenant=i.tenant, attempt_id=i.attempt_id or "", deployment=i.deployment or "",
        operation=i.operation or "", adapter=i.adapter or "", runtime=i.runtime or "",
        compute_mode=i.compute_mode or "", region=i.region or "", zone=i.zone,
        gpu=i.gpu or "", gpu_count=int(i.gpu_count or 0), started_at_ms=int(i.started_at_ms or 0),
        finished_at_ms=None if i.finished_at_ms is None else int(i.finished_at_ms),
        outcome=i.outcome or "", error_code=i.error_code, error_message=i.error_message,
        received_at_ms=int(i.received_at_ms or 0), failure_class=i.failure_class,
        persistent=bool(i.persistent), rule=i.rule, classifier_version=i.classifier_version or "")
