"""What the suite runs against: a local stack's public surface (its HTTP API and CLI) plus, from
the test side only, read access to the moto server behind it (to scan every stored byte) and the
stack's captured log output. Faults are injected from here, never through production switches."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

REGION = "us-east-1"
START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Reply:
    status: int
    text: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def doc(self) -> Any:
        try:
            return json.loads(self.text) if self.text else None
        except ValueError:
            return None


class Http(Protocol):
    def request(self, method: str, path: str, *, key: str | None = None, body: Any = None,
                raw: bytes | None = None, content_type: str = "application/json",
                query: dict[str, Any] | None = None) -> Reply: ...


@dataclass
class UrllibHttp:
    """Plain HTTP against the stack; redirects are not followed (a 303 is an answer)."""

    endpoint: str
    timeout_s: float = 60.0

    def request(self, method: str, path: str, *, key: str | None = None, body: Any = None,
                raw: bytes | None = None, content_type: str = "application/json",
                query: dict[str, Any] | None = None) -> Reply:
        url = self.endpoint.rstrip("/") + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        if key is not None:
            headers["Authorization"] = key if key.startswith(("Bearer ", "Basic ")) else f"Bearer {key}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=self.timeout_s) as resp:
                return Reply(resp.status, resp.read().decode("utf-8", "replace"), dict(resp.headers))
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.read().decode("utf-8", "replace"), dict(exc.headers or {}))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def is_dead_letter_queue(name: str) -> bool:
    """A dead-letter queue of the template: every one is named `<source>DLQ` (template.yaml)."""
    return name.endswith("DLQ")


@dataclass
class Target:
    endpoint: str
    aws_endpoint: str
    tenants: dict[str, str]
    admin_key: str
    log_path: Path | None = None
    http: Http | None = None
    # The stack's operator credentials (its ready line's `aws_credentials`): its moto authorizes
    # every request. Empty: a moto that does not (throwaway credentials).
    aws_credentials: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.http is None:
            self.http = UrllibHttp(self.endpoint)
        self._clients: dict[str, Any] = {}

    # -- the public surface -----------------------------------------------------------------
    def request(self, method: str, path: str, *, tenant: str | None = None, key: str | None = None,
                body: Any = None, raw: bytes | None = None, content_type: str = "application/json",
                query: dict[str, Any] | None = None) -> Reply:
        assert self.http is not None
        if tenant is not None:
            key = self.tenants[tenant]
        return self.http.request(method, path, key=key, body=body, raw=raw,
                                 content_type=content_type, query=query)

    def admin(self, method: str, path: str, body: Any = None) -> Reply:
        return self.request(method, path, key=self.admin_key, body=body)

    def tick(self, function: str) -> Reply:
        return self.request("POST", f"/_local/tick/{function}", key=self.admin_key)

    def route_exists(self, method: str, path: str, tenant: str = "demo") -> bool:
        """A route is served when neither the gateway nor the API resolver answers `No such
        route.` to an authorized request (with no body: nothing is created)."""
        reply = self.request(method, path, tenant=tenant)
        return not (reply.status == 404 and "No such route" in reply.text)

    def cli(self, *args: str, tenant: str | None = "demo", timeout: float = 300,
            input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "INFERCRANE_ENDPOINT": self.endpoint, "NO_COLOR": "1",
               "COLUMNS": "200", "INFERCRANE_ADMIN_KEY": self.admin_key}
        env.pop("INFERCRANE_API_KEY", None)
        if tenant:
            env["INFERCRANE_API_KEY"] = self.tenants[tenant]
        return subprocess.run([sys.executable, "-m", "infercrane.cli.main", *args], env=env,  # noqa: S603
                              capture_output=True, text=True, timeout=timeout, check=False,
                              input=input_text)

    def create_tenant(self, name: str) -> str:
        """Provision a tenant through the admin API; its first API key."""
        reply = self.admin("POST", "/v1/admin/tenants", {"name": name})
        doc = reply.doc or {}
        key = doc.get("api_key") or (doc.get("key") or {}).get("api_key")
        if reply.status not in (200, 201, 202) or not key:
            raise RuntimeError(f"could not create tenant (HTTP {reply.status})")
        self.tenants[name] = key
        return str(key)

    # -- the test side: moto behind the stack -----------------------------------------------
    def aws(self, service: str) -> Any:
        if service not in self._clients:
            import boto3

            creds = self.aws_env()
            self._clients[service] = boto3.session.Session().client(
                service, endpoint_url=self.aws_endpoint, region_name=REGION,
                aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"])
        return self._clients[service]

    def aws_env(self) -> dict[str, str]:
        """Variables for a process that reads the stack's moto directly (a fault-injecting child)."""
        creds = self.aws_credentials or {"AWS_ACCESS_KEY_ID": "local",
                                         "AWS_SECRET_ACCESS_KEY": "local"}
        return {**creds, "AWS_DEFAULT_REGION": REGION}

    def logs(self) -> str | None:
        if self.log_path is None or not self.log_path.exists():
            return None
        return self.log_path.read_text("utf-8", "replace")

    def queue_urls(self) -> dict[str, str]:
        urls = self.aws("sqs").list_queues().get("QueueUrls", [])
        return {url.rsplit("/", 1)[-1]: url for url in urls}

    def settle(self, timeout_s: float = 45.0, quiet_polls: int = 3) -> bool:
        """Wait until every queue is empty, visible and in flight, for a few polls in a row (a
        consumer may be producing into another queue meanwhile)."""
        sqs = self.aws("sqs")
        deadline = time.monotonic() + timeout_s
        # A DLQ keeps what it holds (that is for the scans to judge): not asked at all, which
        # halves the requests of every poll.
        urls = [url for name, url in self.queue_urls().items() if not is_dead_letter_queue(name)]
        quiet = 0
        while time.monotonic() < deadline:
            busy = 0
            for url in urls:
                attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
                    "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed"])["Attributes"]
                busy += int(attrs.get("ApproximateNumberOfMessages", 0))
                busy += int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0))
                busy += int(attrs.get("ApproximateNumberOfMessagesDelayed", 0))
            quiet = quiet + 1 if busy == 0 else 0
            if quiet >= quiet_polls:
                return True
            time.sleep(0.3)
        return False


# -- every stored byte, by place --------------------------------------------------------------
def _logical(name: str) -> str:
    """`infercrane-local-ObservationsTable` -> `ObservationsTable`: a place name stable across
    stacks (physical names may carry a per-stack prefix)."""
    return name.rsplit("-", 1)[-1] if "-" in name else name


class StorageReader(Protocol):
    def places(self) -> list[str]: ...

    def read(self) -> dict[str, list[str]]: ...


@dataclass
class MotoStorage:
    """Reads everything the stack stored: every DynamoDB item (a Scan: this is the test side),
    every S3 object, every SQS message including DLQs (peeked with a zero visibility timeout so
    nothing is consumed), and the stack's captured log output."""

    target: Target

    def places(self) -> list[str]:
        ddb, s3 = self.target.aws("dynamodb"), self.target.aws("s3")
        names = [f"dynamodb:{_logical(t)}" for t in ddb.list_tables()["TableNames"]]
        names += [f"s3:{_logical(b['Name'])}" for b in s3.list_buckets().get("Buckets", [])]
        names += [f"sqs:{_logical(q)}" for q in self.target.queue_urls()]
        names.append("logs:stack")
        return sorted(names)

    def read(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        ddb, s3, sqs = self.target.aws("dynamodb"), self.target.aws("s3"), self.target.aws("sqs")
        for table in ddb.list_tables()["TableNames"]:
            texts: list[str] = []
            for page in ddb.get_paginator("scan").paginate(TableName=table):
                texts += [json.dumps(item, sort_keys=True) for item in page.get("Items", [])]
            out[f"dynamodb:{_logical(table)}"] = texts
        for bucket in s3.list_buckets().get("Buckets", []):
            texts = []
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket["Name"]):
                for obj in page.get("Contents", []):
                    data = s3.get_object(Bucket=bucket["Name"], Key=obj["Key"])["Body"].read()
                    texts.append(obj["Key"] + "\n" + _bytes_text(data))
            out[f"s3:{_logical(bucket['Name'])}"] = texts
        for name, url in self.target.queue_urls().items():
            out[f"sqs:{_logical(name)}"] = peek_messages(sqs, url)
        logs = self.target.logs()
        if logs is not None:
            out["logs:stack"] = [logs]
        return out


def _bytes_text(data: bytes) -> str:
    import gzip

    if data[:2] == b"\x1f\x8b":
        with suppress(OSError):
            data = gzip.decompress(data)
    return data.decode("latin-1")


def peek_messages(sqs: Any, url: str, rounds: int = 20) -> list[str]:
    """Every message body and attribute in a queue, without consuming any."""
    seen: dict[str, str] = {}
    empty = 0
    for _ in range(rounds):
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0,
                                  WaitTimeSeconds=0, MessageAttributeNames=["All"]).get("Messages", [])
        new = [m for m in got if m["MessageId"] not in seen]
        for m in new:
            attrs = {k: v.get("StringValue") or base64.b64encode(v.get("BinaryValue") or b"").decode()
                     for k, v in (m.get("MessageAttributes") or {}).items()}
            seen[m["MessageId"]] = m["Body"] + "\n" + json.dumps(attrs, sort_keys=True)
        empty = empty + 1 if not new else 0
        if empty >= 2:
            break
    return list(seen.values())


def encodings(value: str) -> list[str]:
    """The forms a leaked string may take in storage: itself and its base64 (three alignments)."""
    raw = value.encode()
    forms = {value}
    for shift in range(3):
        enc = base64.b64encode(b"\x00" * shift + raw).decode()
        # Keep only the characters every neighbouring byte leaves unchanged.
        start = -(-shift * 8 // 6)
        forms.add(enc[start:-4])
    return sorted(f for f in forms if len(f) >= 8)


def find_leaks(texts: Sequence[str], value: str) -> int:
    forms = encodings(value)
    return sum(1 for t in texts if any(f in t for f in forms))


# -- starting a stack -------------------------------------------------------------------------
@contextmanager
def local_stack(workdir: Path, tenants: Sequence[str] = ("demo", "other"),
                log_level: str = "INFO") -> Iterator[Target]:
    """`infercrane local serve` in a subprocess (schedules off: the suite fires them itself, so
    nothing changes storage behind a before/after comparison)."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / "ready.json"
    log_path = workdir / "stack.log"
    ready.unlink(missing_ok=True)
    args = [sys.executable, "-m", "infercrane.cli.main", "local", "serve", "--no-schedules",
            "--log-level", log_level, "--ready-file", str(ready)]
    for t in tenants:
        args += ["--tenant", t]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)  # noqa: S603
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready.exists() or not ready.read_text().endswith("\n"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the local stack did not start; its log: " + str(log_path))
            time.sleep(0.1)
        yield target_from_ready(json.loads(ready.read_text()), log_path)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def target_from_ready(doc: dict[str, Any], log_path: Path | None = None,
                      endpoint: str | None = None) -> Target:
    return Target(endpoint or doc["endpoint"], doc["aws_endpoint"], dict(doc["tenants"]),
                  doc["admin_key"], log_path, aws_credentials=dict(doc.get("aws_credentials") or {}))
