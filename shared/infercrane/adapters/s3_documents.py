"""S3 adapter: whole JSON documents in the DocumentsBucket, one object per key.

Generic on purpose: each area keeps its own prefix (`traces/<tenant>/<digest>.json`,
`executions/<tenant>/<id>.json`) and begins it with the tenant.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.errors import DependencyUnavailable, InvalidInput, NotFound

_MISSING = {"NoSuchKey", "404", "NotFound"}


def _check_key(key: str) -> str:
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise InvalidInput("A document key is a relative path of non-empty segments.", field="key")
    return key


class S3DocumentStore:
    def __init__(self, client: Any, bucket: str):
        self._client = client
        self._bucket = bucket

    def put_bytes(self, key: str, body: bytes, content_type: str = "application/json") -> None:
        try:
            self._client.put_object(Bucket=self._bucket, Key=_check_key(key), Body=body,
                                    ContentType=content_type)
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable("Document storage is unavailable.") from exc

    def get_bytes(self, key: str) -> bytes:
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=_check_key(key))
            body: bytes = response["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                raise NotFound("No such document.", field="key") from exc
            raise DependencyUnavailable("Document storage is unavailable.") from exc
        except BotoCoreError as exc:
            raise DependencyUnavailable("Document storage is unavailable.") from exc
        return body

    def put_json(self, key: str, document: Any) -> None:
        self.put_bytes(key, json.dumps(document, separators=(",", ":")).encode())

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))

    def presigned_url(self, key: str, expires_s: int = 300) -> str:
        try:
            url: str = self._client.generate_presigned_url(
                "get_object", Params={"Bucket": self._bucket, "Key": _check_key(key)},
                ExpiresIn=expires_s)
        except (ClientError, BotoCoreError) as exc:
            raise DependencyUnavailable("Document storage is unavailable.") from exc
        return url
