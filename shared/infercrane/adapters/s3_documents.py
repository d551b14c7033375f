"""S3 adapter: whole JSON documents in the DocumentsBucket, one object per key.

Generic on purpose: each area keeps its own prefix (`traces/<tenant>/<digest>.json`,
`executions/<tenant>/<id>.json`) and begins it with the tenant.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from infercrane.errors import DependencyUnavailable, InvalidInput, NotFound

_MISSING = {"NoSuchKey", "404", "NotFound"}
# S3's smallest part (but the last) is 5 MiB; 8 MiB parts keep 100k-request traces (~200 MB)
# far below the 10,000-part limit while holding one part in memory.
PART_BYTES = 8 * 1024 * 1024


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

    def put_stream(self, key: str, chunks: Iterable[bytes],
                   content_type: str = "application/json") -> int:
        """Store the concatenated chunks holding one part at a time (a single PUT when they fit
        in one part, else a multipart upload, aborted on failure). Returns the size in bytes."""
        _check_key(key)
        buffer = bytearray()
        parts: list[dict[str, Any]] = []
        upload_id: str | None = None
        size = 0
        try:
            for chunk in chunks:
                buffer += chunk
                size += len(chunk)
                while len(buffer) >= PART_BYTES:
                    if upload_id is None:
                        upload_id = self._client.create_multipart_upload(
                            Bucket=self._bucket, Key=key, ContentType=content_type)["UploadId"]
                    self._upload_part(key, upload_id, parts, bytes(buffer[:PART_BYTES]))
                    del buffer[:PART_BYTES]
            if upload_id is None:
                self.put_bytes(key, bytes(buffer), content_type)
                return size
            if buffer:
                self._upload_part(key, upload_id, parts, bytes(buffer))
            self._client.complete_multipart_upload(Bucket=self._bucket, Key=key,
                                                   UploadId=upload_id,
                                                   MultipartUpload={"Parts": parts})
        except (ClientError, BotoCoreError) as exc:
            self._abort(key, upload_id)
            raise DependencyUnavailable("Document storage is unavailable.") from exc
        except BaseException:
            self._abort(key, upload_id)
            raise
        return size

    def _upload_part(self, key: str, upload_id: str, parts: list[dict[str, Any]],
                     body: bytes) -> None:
        number = len(parts) + 1
        etag = self._client.upload_part(Bucket=self._bucket, Key=key, UploadId=upload_id,
                                        PartNumber=number, Body=body)["ETag"]
        parts.append({"ETag": etag, "PartNumber": number})

    def _abort(self, key: str, upload_id: str | None) -> None:
        if upload_id is None:
            return
        # If this fails too, the bucket's lifecycle rule aborts the upload after a day.
        with contextlib.suppress(ClientError, BotoCoreError):
            self._client.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id)

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
