"""Import records: one import per (deployment, file); the same file under other options is
refused, or replaces the first import's observations, never doubled."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import pytest
import rfc8785
from pydantic import ValidationError

from infercrane.domain.imports import ImportIn, ImportService, describe
from infercrane.errors import Conflict

SHA = "ab" * 32


class Records:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, str, str], dict[str, Any]] = {}

    def get(self, tenant: str, deployment: str, file_sha256: str) -> dict[str, Any] | None:
        return self.rows.get((tenant, deployment, file_sha256))

    def put(self, tenant: str, record: Mapping[str, Any], replacing: str | None) -> bool:
        key = (tenant, record["deployment"], record["file_sha256"])
        current = self.rows.get(key)
        if (current is None) != (replacing is None) or (
                current is not None and current["import_id"] != replacing):
            return False
        self.rows[key] = dict(record)
        return True


class Observations:
    def __init__(self) -> None:
        self.deleted: list[tuple[Any, ...]] = []

    def delete_import(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
                      id_prefix: str) -> int:
        self.deleted.append((tenant, deployment, start_ms, end_ms, id_prefix))
        return 7


def request(import_id: str, **changes: Any) -> ImportIn:
    return ImportIn.model_validate({
        "deployment": "chat", "import_id": import_id, "file_sha256": SHA,
        "format": "azure-csv", "options": {"start": None, "block_size": 512}, "records": 10,
        "first_arrival": "2026-11-29T00:00:00Z", "last_arrival": "2026-11-29T00:01:00Z",
        **changes})


def test_the_same_import_again_is_the_same_and_another_is_refused():
    service = ImportService(Records(), Observations())
    first = service.register("t1", request("imp-" + "1" * 24), "now")
    assert first["status"] == "new"
    assert service.register("t1", request("imp-" + "1" * 24), "later")["status"] == "same"
    with pytest.raises(Conflict) as refused:
        service.register("t1", request("imp-" + "2" * 24), "later")
    assert refused.value.code == "import_conflict"
    # Another tenant, or another deployment, has its own record.
    assert service.register("t2", request("imp-" + "2" * 24), "now")["status"] == "new"
    assert service.register("t1", request("imp-" + "2" * 24, deployment="other"),
                            "now")["status"] == "new"


def test_replace_deletes_exactly_the_first_imports_observations():
    observations = Observations()
    service = ImportService(Records(), observations)
    service.register("t1", request("imp-" + "1" * 24), "now")
    done = service.register("t1", request("imp-" + "2" * 24, replace=True,
                                          options={"start": "2026-12-01T00:00:00.000Z",
                                                   "block_size": 512}), "later")
    assert (done["status"], done["replaced"], done["deleted"]) == (
        "replaced", "imp-" + "1" * 24, 7)
    start_ms = 1_795_910_400_000
    # The first import's ids begin with the digest of its rows, format and options (the
    # service's, never the client's word); the new import's differ.
    options = hashlib.sha256(rfc8785.dumps({"format": "azure-csv", "options": {
        "start": None, "block_size": 512}})).hexdigest()
    first = hashlib.sha256(rfc8785.dumps({"rows": SHA, "options": options})).hexdigest()[:16]
    assert observations.deleted == [("t1", "chat", start_ms, start_ms + 60_001,
                                     f"imp-{first}-")]
    assert done["id_prefix"] != f"imp-{first}-"
    assert describe(done)["first_arrival"] == "2026-11-29T00:00:00.000Z"


def test_replacing_a_record_made_before_row_identity_deletes_its_line_numbered_ids():
    records, observations = Records(), Observations()
    service = ImportService(records, observations)
    service.register("t1", request("imp-" + "1" * 24), "now")
    for record in records.rows.values():
        del record["id_prefix"]
    service.register("t1", request("imp-" + "2" * 24, replace=True), "later")
    assert observations.deleted[0][-1] == "imp-" + "1" * 24 + "-"


def test_the_record_is_closed_and_bounded():
    with pytest.raises(ValidationError):
        request("imp-" + "1" * 24, prompt="CANARY")
    with pytest.raises(ValidationError):
        request("not-an-import-id")
    with pytest.raises(ValidationError):
        request("imp-" + "1" * 24, options={f"k{n}": n for n in range(17)})
    with pytest.raises(ValidationError):
        request("imp-" + "1" * 24, options={"revision": "x" * 129})
    with pytest.raises(ValidationError):
        request("imp-" + "1" * 24, options={"timing_model": {"Bad Key": 1}})
    with pytest.raises(ValidationError):  # closed: only the options the CLI records
        request("imp-" + "1" * 24, options={"note": "free text"})
    with pytest.raises(ValidationError):
        request("imp-" + "1" * 24, options={"timing_model": {"name": "linear-v1",
                                                             "overhead_ms": 1e300}})
    assert request("imp-" + "1" * 24, options={"timing_model": {
        "name": "linear-v1", "overhead_ms": 50.0, "prefill_ms_per_token": 0.1,
        "decode_ms_per_token": 20.0}})


def test_the_record_takes_exactly_the_timestamp_units_the_importer_reads():
    # Two spellings of one list (the deployed record cannot import the CLI-side reader): kept equal.
    from typing import get_args

    from infercrane.adapters.trace_files import TIMESTAMP_UNITS
    from infercrane.domain.imports import ImportOptionsIn

    annotation = ImportOptionsIn.model_fields["timestamp_unit"].annotation
    units = {a for arg in get_args(annotation) for a in get_args(arg)}
    assert units == set(TIMESTAMP_UNITS)


def test_replacing_an_import_never_deletes_by_another_imports_prefix():
    # Two imports of other rows under the same format and options: replacing one deletes by its
    # own prefix only (the prefix once held format and options alone, so it named both).
    observations = Observations()
    service = ImportService(Records(), observations)
    service.register("t1", request("imp-" + "1" * 24), "now")
    other = service.register("t1", request("imp-" + "3" * 24, file_sha256="cd" * 32), "now")
    service.register("t1", request("imp-" + "2" * 24, replace=True,
                                   options={"start": None, "block_size": 256}), "later")
    assert [prefix for *_, prefix in observations.deleted] != [other["id_prefix"]]
    assert other["id_prefix"] not in {prefix for *_, prefix in observations.deleted}
