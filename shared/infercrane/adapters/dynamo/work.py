"""Work buckets in DirectoryTable: one item per tenant (`WORK#<t>` / `WORK`, number `tat`).

Each charge is a conditional UpdateItem and no read. GCRA's max(tat, now) is two cases, each one
atomic write: while the bucket is busy (tat > now) `SET tat = tat + cost` if the result stays
within the limit; while it is idle `SET tat = now + cost` if tat <= now. The write that fails its
condition returns the item (`ReturnValuesOnConditionCheckFailure`), which says whether the
request is over the limit or the other case holds. For one `now`, a busy bucket stays busy (tat
only grows), so a charge takes at most three writes and usually one. Each write, passed or
failed, is one write request unit.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.errors import DependencyUnavailable

ATTEMPTS = 3


class DynamoWorkBuckets:
    def __init__(self, client: Any, table: str):
        self._client = client
        self._table = table

    def advance(self, tenant: str, *, now_ms: int, cost_ms: int, latest_ms: int,
                known_ms: int) -> tuple[bool, int]:
        key = {"pk": {"S": f"WORK#{tenant}"}, "sk": {"S": "WORK"}}
        busy = known_ms > now_ms
        tat = max(known_ms, now_ms)
        for _ in range(ATTEMPTS):
            if busy:
                update = {"UpdateExpression": "SET tat = tat + :cost",
                          "ConditionExpression": "tat > :now AND tat <= :last",
                          "ExpressionAttributeValues": {
                              ":cost": {"N": str(cost_ms)}, ":now": {"N": str(now_ms)},
                              ":last": {"N": str(latest_ms - cost_ms)}}}
            else:
                update = {"UpdateExpression": "SET tat = :tat",
                          "ConditionExpression": "attribute_not_exists(tat) OR tat <= :now",
                          "ExpressionAttributeValues": {
                              ":tat": {"N": str(now_ms + cost_ms)}, ":now": {"N": str(now_ms)}}}
            try:
                out = self._client.update_item(
                    TableName=self._table, Key=key, ReturnValues="UPDATED_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD", **update)
                return True, int(out["Attributes"]["tat"]["N"])
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise DependencyUnavailable("The work bucket is unavailable.") from exc
                tat = int((exc.response.get("Item") or {}).get("tat", {}).get("N", now_ms))
            except BotoCoreError as exc:
                raise DependencyUnavailable("The work bucket is unavailable.") from exc
            if tat + cost_ms > latest_ms:
                return False, tat
            busy = tat > now_ms
        return False, tat  # raced three times by other charges: the bucket is that busy
