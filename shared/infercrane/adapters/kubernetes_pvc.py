"""Kubernetes adapter (official `kubernetes` client): PVCs restored from VolumeSnapshots.

The location is `cluster/namespace`; an `ApiClient` per cluster comes from `cluster_client`
(a local endpoint, an EKS IAM-signed token, or a kubeconfig in Secrets Manager). Objects are read
with `_preload_content=False` and parsed as JSON, so the rules see exactly what the API server
serves. The PVC name is deterministic: a 409 AlreadyExists on create means an earlier delivery
made it, which is done, not failed.
"""

from __future__ import annotations

import base64
import json
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from infercrane.domain.providers.kubernetes import SNAPSHOT_GROUP, KubernetesRules
from infercrane.domain.providers.message import Target
from infercrane.domain.providers.model import ProviderCallFailed
from infercrane.errors import DependencyUnavailable

DEFAULT_RESTORE_SIZE = "1Gi"


class KubernetesPvcAdapter:
    provider = "kubernetes"

    def __init__(self, client_for: Callable[[str], Any], *, storage_class: str | None = None):
        self._client_for = client_for
        self._storage_class = storage_class
        self._rules = KubernetesRules()

    def _apis(self, target: Target) -> tuple[Any, Any, Any, str]:
        from kubernetes import client as k8s

        cluster, namespace = target.split_location()
        api = self._client_for(cluster)
        return k8s.CoreV1Api(api), k8s.CustomObjectsApi(api), k8s.StorageV1Api(api), namespace

    def describe_source(self, target: Target) -> dict[str, Any] | None:
        _, custom, _, ns = self._apis(target)
        return self._read(custom.get_namespaced_custom_object, SNAPSHOT_GROUP, "v1", ns,
                          "volumesnapshots", target.snapshot_ref()[1])

    def find(self, target: Target) -> dict[str, Any] | None:
        return self.describe(target, target.name)

    def create(self, target: Target, source: dict[str, Any]) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        core, _, _, ns = self._apis(target)
        size = str((source.get("status") or {}).get("restoreSize") or DEFAULT_RESTORE_SIZE)
        body = self._rules.manifest(target, size, self._storage_class)
        try:
            resp = self._guard(core.create_namespaced_persistent_volume_claim, ns, body,
                               _preload_content=False)
            return dict(json.loads(resp.data))
        except ApiException as exc:
            if exc.status != 409:
                raise _provider_error(exc) from exc
        existing = self.find(target)  # 409 AlreadyExists: made by an earlier delivery
        if existing is None:
            raise ProviderCallFailed("kubernetes", "NotFound", "claim absent after conflict")
        return existing

    def describe(self, target: Target, resource_id: str) -> dict[str, Any] | None:
        core, _, _, ns = self._apis(target)
        return self._read(core.read_namespaced_persistent_volume_claim, resource_id, ns)

    def delete(self, target: Target, resource_id: str) -> None:
        from kubernetes.client.exceptions import ApiException

        core, _, _, ns = self._apis(target)
        try:
            self._guard(core.delete_namespaced_persistent_volume_claim, resource_id, ns,
                        _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise _provider_error(exc) from exc

    def facts(self, target: Target, resource: dict[str, Any]) -> dict[str, str]:
        name = (resource.get("spec") or {}).get("storageClassName")
        if not name:
            return {}
        _, _, storage, _ = self._apis(target)
        sc = self._read(storage.read_storage_class, name)
        mode = (sc or {}).get("volumeBindingMode")
        return {"volume_binding_mode": str(mode)} if mode else {}

    def _read(self, method: Any, *args: Any) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self._guard(method, *args, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _provider_error(exc) from exc
        return dict(json.loads(resp.data))

    @staticmethod
    def _guard(method: Any, *args: Any, **kwargs: Any) -> Any:
        from urllib3.exceptions import HTTPError

        try:
            return method(*args, **kwargs)
        except HTTPError as exc:
            raise DependencyUnavailable("The Kubernetes API is unavailable.",
                                        field="provider") from exc


def _provider_error(exc: Any) -> Exception:
    status_code = getattr(exc, "status", None)
    if isinstance(status_code, int) and (status_code == 429 or status_code >= 500):
        # Server-side or throttled: retry through the queue whatever the reason says.
        return DependencyUnavailable("The Kubernetes API is unavailable.", field="provider")
    reason, message = getattr(exc, "reason", None), None
    try:
        status = json.loads(exc.body or "{}")
        reason, message = status.get("reason") or reason, status.get("message")
    except (TypeError, ValueError):
        pass
    return ProviderCallFailed("kubernetes", reason, message, status=getattr(exc, "status", None))


# -- cluster credentials -----------------------------------------------------------------------
def eks_token(sts: Any, cluster: str) -> str:
    """An EKS bearer token: a presigned STS GetCallerIdentity URL naming the cluster (what
    `aws eks get-token` produces). Valid ~15 minutes."""

    def _keep(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if "x-k8s-aws-id" in params:
            context["x-k8s-aws-id"] = params.pop("x-k8s-aws-id")

    def _inject(request: Any, **_: Any) -> None:
        if "x-k8s-aws-id" in request.context:
            request.headers["x-k8s-aws-id"] = request.context["x-k8s-aws-id"]

    sts.meta.events.register("provide-client-params.sts.GetCallerIdentity", _keep)
    sts.meta.events.register("before-sign.sts.GetCallerIdentity", _inject)
    url = sts.generate_presigned_url("get_caller_identity", Params={"x-k8s-aws-id": cluster},
                                     ExpiresIn=60, HttpMethod="GET")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class ClusterClients:
    """`ApiClient`s per cluster name, built from one of three sources (see docs/adapters.md):
    a fixed endpoint (local emulator), EKS (`DescribeCluster` + IAM-signed token, refreshed
    before it expires), or a kubeconfig stored in Secrets Manager at `<prefix>/kubeconfigs/<c>`."""

    TOKEN_TTL_S = 600.0

    def __init__(self, *, endpoint: str | None = None, auth: str = "kubeconfig",
                 secrets: Any = None, secret_prefix: str = "infercrane",  # noqa: S107 - a name
                 eks: Any = None, sts: Any = None):
        self._endpoint, self._auth = endpoint, auth
        self._secrets, self._prefix = secrets, secret_prefix.rstrip("/")
        self._eks, self._sts = eks, sts
        self._cache: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, cluster: str) -> Any:
        with self._lock:
            hit = self._cache.get(cluster)
            if hit and time.monotonic() - hit[0] < self.TOKEN_TTL_S:
                return hit[1]
            api = self._build(cluster)
            self._cache[cluster] = (time.monotonic(), api)
            return api

    def _build(self, cluster: str) -> Any:
        from kubernetes import client as k8s
        from kubernetes import config as k8s_config

        try:
            if self._endpoint:
                conf = k8s.Configuration()
                conf.host = self._endpoint
                return k8s.ApiClient(conf)
            if self._auth == "eks":
                info = self._eks.describe_cluster(name=cluster)["cluster"]
                conf = k8s.Configuration()
                conf.host = info["endpoint"]
                with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as ca:
                    ca.write(base64.b64decode(info["certificateAuthority"]["data"]))
                conf.ssl_ca_cert = ca.name
                conf.api_key = {"authorization": f"Bearer {eks_token(self._sts, cluster)}"}
                return k8s.ApiClient(conf)
            import yaml

            secret = self._secrets.get_secret_value(SecretId=f"{self._prefix}/kubeconfigs/{cluster}")
            return k8s_config.new_client_from_config_dict(yaml.safe_load(secret["SecretString"]))
        except Exception as exc:  # boto/botocore/yaml/kubernetes config errors alike
            if _transient(exc):
                raise DependencyUnavailable("Cluster credentials are unavailable.",
                                            field="location") from exc
            # A missing or unreadable kubeconfig secret, an unknown EKS cluster, a kubeconfig
            # that does not load: no retry can fix it, so the request fails with this reason
            # instead of cycling through the queue into its DLQ.
            raise ProviderCallFailed("kubernetes", CLUSTER_CONFIG_ERROR,
                                     f"cluster configuration for {cluster!r} is unusable: "
                                     f"{type(exc).__name__}") from exc


CLUSTER_CONFIG_ERROR = "ClusterConfigError"
# AWS error codes of the credential sources (Secrets Manager, EKS) that a retry may clear.
_TRANSIENT_AWS_CODES = frozenset({
    "Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded",
    "InternalServiceError", "InternalFailure", "InternalServerError", "ServerException",
    "ServiceUnavailable", "ServiceUnavailableException",
})


def _transient(exc: Exception) -> bool:
    """Network trouble and throttled or failing AWS services are worth a retry; everything else
    about a cluster's configuration is permanent."""
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return error.get("Code") in _TRANSIENT_AWS_CODES or int(status) >= 500
    return isinstance(exc, ConnectionError | HTTPClientError | HTTPError | TimeoutError)
