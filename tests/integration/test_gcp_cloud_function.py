"""The Google Cloud Function deployment of the GCP adapter (infra/gcp/main.py): a Pub/Sub
CloudEvent through functions-framework, google-cloud-compute against the GCE emulator, and the
observation reported back through the API (a recording stand-in for `POST /v1/cache-observations`).
Where `gcloud` is installed, the real Pub/Sub emulator pushes to functions-framework."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infercrane.domain.providers.model import binding
from tests.emulators._http import JsonEmulator
from tests.emulators.gce import GceEmulator

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32
REQUEST_ID = "pf_" + "0" * 32 + "_1"
MESSAGE = {"schema": "infercrane.prefetch/v1", "action": "prefetch", "tenant": "demo",
           "request_id": REQUEST_ID, "model": DIGEST, "adapter": "gcp",
           "location": "us-central1-a", "source": "projects/models/global/snapshots/llama",
           "attempt": 1}


class RecordingApi(JsonEmulator):
    """Stands in for the InferCrane API: answers the request and records observations."""

    def __init__(self) -> None:
        super().__init__()
        self.observations: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.resources: dict[str, str] = {}
        self.route("GET", "/v1/prefetch-requests/(?P<id>[^/]+)",
                   lambda m, q, b: (200, {"id": m["id"], "status": "dispatched",
                                          "resources": dict(self.resources)}))
        self.route("POST", "/v1/cache-observations", self._observe)
        self.route("POST", "/v1/prefetch-requests/(?P<id>[^/]+)/status", self._status)
        self.route("PUT", "/v1/prefetch-requests/(?P<id>[^/]+)/resources/(?P<key>[^/]+)",
                   self._resource)

    def _status(self, m: Any, _q: Any, body: Any) -> tuple[int, Any]:
        self.statuses.append(body)
        return 200, {"id": m["id"], "status": body["status"]}

    def _resource(self, m: Any, _q: Any, body: Any) -> tuple[int, Any]:
        stored = self.resources.setdefault(m["key"], body["value"])  # first writer wins
        return 200, {"id": m["id"], "key": m["key"], "value": stored}

    def _observe(self, _m: Any, _q: Any, body: Any) -> tuple[int, Any]:
        self.observations.append(body)
        return 200, {"state": body["state"], "applied": True}


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RecordingApi, GceEmulator]]:
    api, gce = RecordingApi(), GceEmulator()
    api.start()
    gce.start()
    gce.add_snapshot("models", "llama", binding(DIGEST))
    env = {"INFERCRANE_ENDPOINT": api.endpoint, "INFERCRANE_API_KEY": "ick_test",
           "INFERCRANE_TENANT": "demo", "INFERCRANE_GCP_PROJECT": "infer",
           "INFERCRANE_GCP_COMPUTE_ENDPOINT": gce.endpoint}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield api, gce
    api.stop()
    gce.stop()


def client() -> Any:
    from functions_framework import create_app

    app = create_app(target="prefetch", source=str(REPO / "infra" / "gcp" / "main.py"),
                     signature_type="cloudevent")
    sys.modules["main"].runner.cache_clear()  # fresh settings per test
    return app.test_client()


def pubsub_event(message: dict[str, Any]) -> dict[str, Any]:
    data = base64.b64encode(json.dumps(message).encode()).decode()
    return {"specversion": "1.0", "type": "google.cloud.pubsub.topic.v1.messagePublished",
            "source": "//pubsub.googleapis.com/projects/infer/topics/infercrane-adapter-gcp",
            "id": "1", "datacontenttype": "application/json",
            "data": {"message": {"data": data, "messageId": "1"},
                     "subscription": "projects/infer/subscriptions/adapter"}}


def test_cloud_function_prefetches_and_reports_present_through_the_api(world):
    api, gce = world
    resp = client().post("/", json=pubsub_event(MESSAGE),
                         headers={"Content-Type": "application/cloudevents+json"})
    assert resp.status_code == 200
    assert gce.inserts == 1
    assert api.observations[-1]["state"] == "present"
    plan = json.loads(api.observations[-1]["evidence"]["attach_plan"])
    assert plan["attachedDisks"][0]["mode"] == "READ_ONLY"
    # The request's status moved through the API too (not only the cache observation).
    assert [s["status"] for s in api.statuses] == ["in_progress", "completed"]
    assert api.resources["resource_id"] and "attach_plan" in api.resources


def test_cloud_function_fails_the_request_through_the_api_when_the_source_is_missing(world):
    api, gce = world
    missing = {**MESSAGE, "source": "projects/models/global/snapshots/absent"}
    resp = client().post("/", json=pubsub_event(missing),
                         headers={"Content-Type": "application/cloudevents+json"})
    assert resp.status_code == 200
    assert api.statuses[-1]["status"] == "failed" and api.statuses[-1]["reason"]
    assert gce.inserts == 0


def test_cloud_function_fails_the_delivery_while_the_disk_restores_so_pubsub_redelivers(world):
    api, gce = world
    gce.ready_after_s = 30
    resp = client().post("/", json=pubsub_event(MESSAGE),
                         headers={"Content-Type": "application/cloudevents+json"})
    assert resp.status_code == 500
    assert api.observations[-1]["state"] == "prefetching"


def test_cloud_function_ignores_another_tenants_message(world):
    api, gce = world
    resp = client().post("/", json=pubsub_event(MESSAGE | {"tenant": "other"}),
                         headers={"Content-Type": "application/cloudevents+json"})
    assert resp.status_code == 200
    assert gce.inserts == 0
    assert api.observations == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError as exc:
            if getattr(exc, "code", None):
                return  # an HTTP error still means it is listening
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not start")


def _put(url: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcloud") is None,
                    reason="gcloud (with the Pub/Sub emulator) is not installed on this machine")
def test_pubsub_emulator_push_reaches_the_function_and_the_disk_is_prefetched(world, tmp_path):
    api, gce = world
    ps_port, ff_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'shared'}:{REPO}"}
    procs = [
        subprocess.Popen(["gcloud", "beta", "emulators", "pubsub", "start",
                          f"--host-port=127.0.0.1:{ps_port}", "--project=infer"],
                         stdout=subprocess.DEVNULL, stderr=open(tmp_path / "ps.log", "wb"),  # noqa: SIM115
                         start_new_session=True),
        subprocess.Popen([str(Path(sys.executable).parent / "functions-framework"),
                          "--target=prefetch", "--signature-type=cloudevent",
                          f"--source={REPO / 'infra' / 'gcp' / 'main.py'}",
                          "--host=127.0.0.1", f"--port={ff_port}"], env=env,
                         stdout=subprocess.DEVNULL, stderr=open(tmp_path / "ff.log", "wb"),  # noqa: SIM115
                         start_new_session=True),
    ]
    try:
        base = f"http://127.0.0.1:{ps_port}/v1/projects/infer"
        _wait(f"http://127.0.0.1:{ps_port}/", 60)
        _wait(f"http://127.0.0.1:{ff_port}/", 30)
        _put(f"{base}/topics/adapter-gcp", {})
        _put(f"{base}/subscriptions/adapter-gcp-push",
             {"topic": "projects/infer/topics/adapter-gcp",
              "pushConfig": {"pushEndpoint": f"http://127.0.0.1:{ff_port}/"}})
        data = base64.b64encode(json.dumps(MESSAGE).encode()).decode()
        req = urllib.request.Request(f"{base}/topics/adapter-gcp:publish", method="POST",
                                     data=json.dumps({"messages": [{"data": data}]}).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10)
        deadline = time.monotonic() + 30
        while not api.observations and time.monotonic() < deadline:
            time.sleep(0.2)
        assert api.observations, (tmp_path / "ff.log").read_text()[-2000:]
        assert api.observations[-1]["state"] == "present"
        assert gce.inserts == 1
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, 15)
            p.wait(timeout=20)
