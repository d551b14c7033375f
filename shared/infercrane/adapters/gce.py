"""Compute Engine adapter (google-cloud-compute, REST transport, injected clients).

Disks are looked up by their deterministic name first, then inserted from the named snapshot or
image with a deterministic `requestId` (GCE deduplicates retried inserts by it); a 409 on insert
means an earlier delivery created it. Returns GCE's documented JSON (camelCase) so the pure rules
in `domain/providers/gcp.py` read the same shape the API serves.
"""

from __future__ import annotations

import json
import re
from typing import Any

from infercrane.domain.providers.gcp import PREFETCH_KEY_LABEL, source_kind
from infercrane.domain.providers.message import Target
from infercrane.domain.providers.model import ProviderCallFailed, binding
from infercrane.errors import DependencyUnavailable, InvalidInput

_SOURCE = re.compile(r"^(?:https://www\.googleapis\.com/compute/v1/)?projects/([^/]+)/global/"
                     r"(snapshots|images)/([a-z]([-a-z0-9]{0,61}[a-z0-9])?)$")


GCE_CLIENTS = ("DisksClient", "SnapshotsClient", "ImagesClient")  # GceAdapter's arguments, in order


def parse_source(source: str) -> tuple[str, str, str]:
    m = _SOURCE.match(source)
    if not m:
        raise InvalidInput("source must be projects/P/global/snapshots/NAME or "
                           "projects/P/global/images/NAME.", field="source")
    return m.group(1), m.group(2), m.group(3)


class GceAdapter:
    provider = "gcp"

    def __init__(self, disks: Any, snapshots: Any, images: Any, project: str,
                 disk_type: str = "pd-balanced"):
        self._disks, self._snapshots, self._images = disks, snapshots, images
        self._project = project
        self._disk_type = disk_type

    def describe_source(self, target: Target) -> dict[str, Any] | None:
        project, kind, name = parse_source(target.source)
        if kind == "snapshots":
            return self._get(self._snapshots.get, project=project, snapshot=name)
        return self._get(self._images.get, project=project, image=name)

    def find(self, target: Target) -> dict[str, Any] | None:
        return self.describe(target, target.name)

    def create(self, target: Target, source: dict[str, Any]) -> dict[str, Any]:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        project, kind, name = parse_source(target.source)
        disk = compute_v1.Disk(
            name=target.name,
            description=f"{binding(target.model)} prefetch of {source_kind(target.source)}",
            labels={PREFETCH_KEY_LABEL: target.key, "managed-by": "infercrane"},
            type_=f"projects/{self._project}/zones/{target.location}/diskTypes/{self._disk_type}",
        )
        ref = f"projects/{project}/global/{kind}/{name}"
        if kind == "snapshots":
            disk.source_snapshot = ref
        else:
            disk.source_image = ref
        request = compute_v1.InsertDiskRequest(project=self._project, zone=target.location,
                                               disk_resource=disk, request_id=target.request_uuid("insert"))
        try:
            # Not waiting on the operation: the runner observes the disk itself
            # (CREATING/RESTORING = prefetching) and re-checks later.
            self._disks.insert(request=request)
        except gexc.Conflict:
            pass  # an earlier delivery created it: done, not failed
        except gexc.GoogleAPICallError as exc:
            raise _provider_error(exc) from exc
        except gexc.RetryError as exc:
            raise DependencyUnavailable("Compute Engine is unavailable.", field="provider") from exc
        created = self.describe(target, target.name)
        if created is None:
            raise ProviderCallFailed("gcp", "RESOURCE_NOT_FOUND", "disk absent after insert")
        return created

    def describe(self, target: Target, resource_id: str) -> dict[str, Any] | None:
        return self._get(self._disks.get, project=self._project, zone=target.location,
                         disk=resource_id)

    def delete(self, target: Target, resource_id: str) -> None:
        from google.api_core import exceptions as gexc
        from google.cloud import compute_v1

        try:
            self._disks.delete(request=compute_v1.DeleteDiskRequest(
                project=self._project, zone=target.location, disk=resource_id,
                request_id=target.request_uuid("delete")))
        except gexc.NotFound:
            return
        except gexc.GoogleAPICallError as exc:
            raise _provider_error(exc) from exc

    def facts(self, target: Target, resource: dict[str, Any]) -> dict[str, str]:
        return {}

    def _get(self, method: Any, **kwargs: Any) -> dict[str, Any] | None:
        from google.api_core import exceptions as gexc

        try:
            got = method(**kwargs)
        except gexc.NotFound:
            return None
        except gexc.GoogleAPICallError as exc:
            raise _provider_error(exc) from exc
        except gexc.RetryError as exc:
            raise DependencyUnavailable("Compute Engine is unavailable.", field="provider") from exc
        return dict(json.loads(type(got).to_json(got)))


def _provider_error(exc: Any) -> Exception:
    status = getattr(exc, "code", None)
    if isinstance(status, int) and (status == 429 or status >= 500):
        # Server-side or throttled: retry through the queue whatever the reason says.
        return DependencyUnavailable("Compute Engine is unavailable.", field="provider")
    code = getattr(exc, "reason", None)
    if not code:
        errors = getattr(exc, "errors", None) or []
        first = errors[0] if errors else None
        code = first.get("reason") if isinstance(first, dict) else None
    if not code and status is not None:
        code = str(status)
    return ProviderCallFailed("gcp", code, getattr(exc, "message", None),
                              status=int(status) if isinstance(status, int) else None)


def compute_client(kind: str, project_endpoint: str | None, credentials: Any = None) -> Any:
    """One Compute Engine REST client (`kind`: "DisksClient", "SnapshotsClient" or
    "ImagesClient"); `project_endpoint` points it at a local emulator (`http://127.0.0.1:P`),
    else Google's endpoint with `credentials`."""
    from google.api_core.client_options import ClientOptions
    from google.cloud import compute_v1

    kwargs: dict[str, Any] = {"transport": "rest"}
    if project_endpoint:
        from google.auth.credentials import AnonymousCredentials

        kwargs["credentials"] = AnonymousCredentials()
        kwargs["client_options"] = ClientOptions(api_endpoint=project_endpoint)
    elif credentials is not None:
        kwargs["credentials"] = credentials
    return getattr(compute_v1, kind)(**kwargs)


def disks_clients(project_endpoint: str | None, credentials: Any = None) -> tuple[Any, Any, Any]:
    """DisksClient, SnapshotsClient, ImagesClient (see `compute_client`)."""
    disks, snapshots, images = (compute_client(kind, project_endpoint, credentials)
                                for kind in GCE_CLIENTS)
    return disks, snapshots, images


def workload_identity_credentials(config: str,
                                  scopes: tuple[str, ...] = ("https://www.googleapis.com/auth/compute",),
                                  ) -> Any:
    """Credentials from a workload identity federation config (external_account JSON, inline or
    a file path): the Lambda's AWS role is exchanged for a short-lived Google token, no key file."""
    import google.auth

    text = config if config.lstrip().startswith("{") else open(config).read()  # noqa: SIM115
    creds, _ = google.auth.load_credentials_from_dict(
        json.loads(text), scopes=list(scopes))
    return creds
