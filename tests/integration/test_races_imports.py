"""Import records under concurrent registrations and a replacement killed between its writes
(moto's server): one record per (deployment, file) whoever races, and a replacement's crash
point (old observations deleted, record not yet swapped) is completed by running it again."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from infercrane.adapters.dynamo.imports import DynamoImportStore
from infercrane.adapters.dynamo.observations import DynamoObservationStore
from infercrane.domain.imports import ImportIn, ImportService, id_prefix
from infercrane.domain.observation import StoredObservation
from infercrane.errors import Conflict

SHA = "ab" * 32
BASE_MS = 1_795_910_400_000  # 2026-11-29T00:00:00Z


class Crash(Exception):
    pass


def request(import_id: str, replace: bool = False, options: dict[str, Any] | None = None) -> ImportIn:
    return ImportIn.model_validate({
        "deployment": "chat", "import_id": import_id, "file_sha256": SHA, "format": "azure-csv",
        "options": options or {}, "records": 10, "first_arrival": "2026-11-29T00:00:00Z",
        "last_arrival": "2026-11-29T00:01:00Z", "replace": replace})


def service(aws: Any) -> ImportService:
    return ImportService(DynamoImportStore(aws.settings.replay_table, aws.container.dynamo),
                         aws.container.observations)


def register(aws: Any, req: ImportIn) -> str:
    try:
        return str(service(aws).register("demo", req, "2026-11-29T01:00:00Z")["status"])
    except Conflict:
        return "conflict"


def rows(options: dict[str, Any]) -> list[StoredObservation]:
    # An import's rows are named by the prefix of its format and options (domain/imports.py).
    prefix = id_prefix("azure-csv", options, SHA)
    return [StoredObservation(
        tenant="demo", deployment="chat", observation_id=f"{prefix}{n:08d}",
        arrival_ms=BASE_MS + n * 1000, input_tokens=10, output_tokens=5, latency_ms=50.0,
        outcome="ok", streaming=False, sampling_rate=1.0, source="imported",
        ingested_at_ms=BASE_MS + 3_600_000, fingerprint=f"{n:064x}") for n in range(10)]


def test_concurrent_registrations_of_one_file_keep_one_record(aws):
    first = "imp-" + "1" * 24
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: register(aws, request(first)), range(6)))
    assert sorted(answers) == ["new"] + ["same"] * 5
    other = "imp-" + "2" * 24
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: register(aws, request(other)), range(6)))
    assert answers == ["conflict"] * 6  # another import of the file, without --replace


def test_a_replacement_killed_after_deleting_is_completed_by_running_it_again(aws, monkeypatch):
    old, new = "imp-" + "1" * 24, "imp-" + "2" * 24
    before, after = {}, {"block_size": 512}  # the replacement's other options: other row ids
    store: DynamoObservationStore = aws.container.observations
    register(aws, request(old, options=before))
    store.put_many(rows(before))
    real = DynamoImportStore.put

    def killed(self: Any, *args: Any, **kwargs: Any) -> bool:
        raise Crash  # the record swap never happens: the crash point after the deletion

    monkeypatch.setattr(DynamoImportStore, "put", killed)
    with pytest.raises(Crash):
        service(aws).register("demo", request(new, replace=True, options=after),
                              "2026-11-29T01:00:00Z")
    monkeypatch.setattr(DynamoImportStore, "put", real)
    assert list(store.query("demo", "chat", 0, 2**42)) == []  # deleted; the record still old
    assert register(aws, request(new, replace=True, options=after)) == "replaced"
    store.put_many(rows(after))
    prefix = id_prefix("azure-csv", after, SHA)
    assert {o.observation_id[:len(prefix)] for o in store.query("demo", "chat", 0, 2**42)} == {prefix}
