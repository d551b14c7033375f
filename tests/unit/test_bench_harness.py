"""The bench's own machinery (bench/): what it measures must be right, whatever the timings.
No timing is asserted here."""

from __future__ import annotations

import json

import pytest
from bench.common import Figure, info, ratio
from bench.figures.capacity import RangeTable


def _table(n: int = 50) -> RangeTable:
    table = RangeTable("t")
    rows = [(f"{i:05d}#x", {"pk": {"S": "p"}, "sk": {"S": f"{i:05d}#x"}, "v": {"N": str(i)}})
            for i in range(n)]
    table.extend("p", rows)
    return table


def _query(table: RangeTable, **extra: object) -> dict:
    request = {"TableName": "t", "KeyConditionExpression": "#0 = :0 AND #1 BETWEEN :1 AND :2",
               "ExpressionAttributeNames": {"#0": "pk", "#1": "sk"},
               "ExpressionAttributeValues": {":0": {"S": "p"}, ":1": {"S": "00010"},
                                             ":2": {"S": "00019$"}}, **extra}
    return json.loads(table.query(request))


def test_range_table_reads_only_the_key_range_and_counts_what_it_read():
    page = _query(_table())
    assert [i["sk"]["S"][:5] for i in page["Items"]] == [f"{i:05d}" for i in range(10, 20)]
    assert page["ScannedCount"] == page["Count"] == 10
    assert "LastEvaluatedKey" not in page


def test_range_table_pages_continue_where_the_last_one_stopped():
    table, seen, start = _table(), [], None
    while True:
        page = _query(table, Limit=3, **({"ExclusiveStartKey": start} if start else {}))
        seen += [i["sk"]["S"] for i in page["Items"]]
        start = page.get("LastEvaluatedKey")
        if start is None:
            break
    assert seen == [f"{i:05d}#x" for i in range(10, 20)]


def test_range_table_answers_items_as_they_were_stored():
    item = _query(_table())["Items"][1]
    assert item == {"pk": {"S": "p"}, "sk": {"S": "00011#x"}, "v": {"N": "11"}}


def test_range_table_refuses_requests_it_cannot_answer_faithfully():
    with pytest.raises(NotImplementedError):
        _query(_table(), FilterExpression="#v > :0")
    with pytest.raises(NotImplementedError):
        _query(_table(), IndexName="gsi1")


def test_range_table_refuses_rows_out_of_key_order():
    table = _table(4)
    with pytest.raises(ValueError, match="order"):
        table.extend("p", [("00000#a", {"pk": {"S": "p"}, "sk": {"S": "00000#a"}})])


@pytest.mark.parametrize(("value", "target", "met"), [
    (1.5, "<= 1.5", True), (1.51, "<= 1.5", False), (1.0, ">= 1", True), (0.0, ">= 1", False)])
def test_figures_judge_their_target(value, target, met):
    assert ratio("r", value, target).met is met


def test_figures_without_a_target_or_value_are_not_judged():
    assert info("i", 3.0, "s").met is None
    assert Figure("f", None, "x", "<= 1.5").judged().met is None
