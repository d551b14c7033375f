"""The embedded local stack: moto's server, the template's resources, tenants, the HTTP gateway,
queue consumers and schedules, in one process (`infercrane local serve`)."""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from infercrane.local import artifacts, iam, resources
from infercrane.local.counting import RequestCounts, counting_moto_server
from infercrane.local.gateway import Gateway, GatewayServer, serve
from infercrane.local.runtime import FunctionError, FunctionPool, LogSink
from infercrane.local.sigv4 import SigV4Verifier, new_principal
from infercrane.local.template import FunctionSpec, StackTemplate, load
from infercrane.local.throttle import TokenBuckets
from infercrane.local.workers import Scheduler, SqsPoller

log = logging.getLogger("infercrane.local")
REGION = "us-east-1"


def find_template(start: Path | None = None) -> Path:
    """template.yaml of this checkout: beside the package (editable install) or above the cwd."""
    candidates = [Path(__file__).resolve().parents[3]]
    here = (start or Path.cwd()).resolve()
    candidates += [here, *here.parents]
    for folder in candidates:
        if (folder / "template.yaml").is_file() and (folder / "functions").is_dir():
            return folder / "template.yaml"
    raise FileNotFoundError("template.yaml not found; run from the repository or pass --template")


# Idle execution environments stop after ENV_IDLE_S (Lambda retires idle ones too, after some
# minutes; locally memory is the scarcer resource), checked every REAP_EVERY_S.
ENV_IDLE_S = 60.0
REAP_EVERY_S = 10.0


def _trim_heap() -> None:
    """glibc keeps freed heap (moto's request and response buffers) mapped: return it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to trim


# Extra local-only components (emulators) register here: name -> starter(stack) -> env vars.
EXTENSIONS: dict[str, Callable[[LocalStack], dict[str, str]]] = {}


@dataclass
class LocalStack:
    template_path: Path
    host: str = "127.0.0.1"
    port: int = 0
    aws_port: int = 0  # moto's; fixed (4566) for `sam local invoke --env-vars events/env.json`
    tenants: list[str] = field(default_factory=lambda: ["demo"])
    admin_key: str = ""
    retry_delay_s: int = 1
    run_schedules: bool = True
    # Warm execution environments per function at most (each is a process, as on Lambda).
    pool_size: int = 4
    log_level: str = "WARNING"
    # "key": admin routes take the admin key; "iam": only SigV4 signatures, as in AWS.
    admin_auth: str = "key"
    # Count every request as AWS would bill it (local/counting.py; `/_local/counts` answers the
    # totals). Off by default: it buffers and parses every AWS request.
    count_requests: bool = False

    def __post_init__(self) -> None:
        self.admin_key = self.admin_key or "icadmin_" + secrets.token_urlsafe(24)
        self.iam_principal = new_principal() if self.admin_auth == "iam" else None
        self.stop_event = threading.Event()
        self.api_keys: dict[str, str] = {}
        self.pools: dict[str, FunctionPool] = {}
        self.pollers: list[SqsPoller] = []
        self.env: dict[str, str] = {}
        self._moto: Any = None
        self._authorizing = False  # moto's authorization is on (process-wide: off at stop)
        self.operator: iam.Credentials | None = None
        self._declared: set[str] = set()
        self._server: GatewayServer | None = None
        self._warming: list[threading.Thread] = []
        self.template: StackTemplate = load(self.template_path)

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the local stack is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def aws_endpoint(self) -> str:
        host, port = self._moto.get_host_and_port()
        return f"http://{host}:{port}"

    def ready_document(self) -> dict[str, Any]:
        doc = {"endpoint": self.endpoint, "aws_endpoint": self.aws_endpoint,
               "tenants": dict(self.api_keys), "admin_key": self.admin_key,
               "admin_auth": self.admin_auth,
               # For `sam local invoke --env-vars events/env.json` (KMS key ids are random).
               "signing_key_id": self.env.get("INFERCRANE_SIGNING_KEY_ID")}
        if self.operator is not None:
            # The local AWS endpoint authorizes every request: these are allowed everything.
            doc["aws_credentials"] = {"AWS_ACCESS_KEY_ID": self.operator.access_key_id,
                                      "AWS_SECRET_ACCESS_KEY": self.operator.secret_access_key}
        if self.iam_principal is not None:
            # What an operator exports to sign admin calls: AWS_ACCESS_KEY_ID and friends.
            doc["admin_credentials"] = {"access_key_id": self.iam_principal.access_key_id,
                                        "secret_access_key": self.iam_principal.secret_access_key,
                                        "region": REGION}
        return doc

    def start(self) -> LocalStack:
        from moto.server import ThreadedMotoServer

        # Each function runs from its own artifact: build what is missing or stale (a no-op, in
        # milliseconds, when `make install` built them and nothing changed since).
        rebuilt = artifacts.build(self.template, log=log.info)
        if rebuilt:
            log.info("rebuilt %d artifacts: %s", len(rebuilt), ", ".join(rebuilt))
        from infercrane.local import moto_query
        from infercrane.local.kms import honour_digest_signing

        moto_query.install()  # moto's Query walks the whole table on every page
        from infercrane.local import moto_answers

        moto_answers.install()  # moto's serializer takes tens of µs per attribute value
        from infercrane.local import moto_writes

        moto_writes.install()  # moto's item building is quadratic, its request parsing slow
        from infercrane.local import moto_atomic

        moto_atomic.install()  # conditional writes and transactions as atomic as AWS's

        honour_digest_signing()  # evidence is signed over digests, as KMS does in AWS
        caller = dict(os.environ)  # before this process's own settings are added below
        self.counts = RequestCounts() if self.count_requests else None
        self._moto = (ThreadedMotoServer if self.counts is None else partial(
            counting_moto_server, self.counts))(ip_address=self.host, port=self.aws_port,
                                                verbose=False)
        self._moto.start()
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request lines
        aws = self.aws_endpoint
        # Set-up runs before moto authorizes requests, with throwaway credentials.
        os.environ.update({
            "AWS_ENDPOINT_URL": aws, "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION,
            "POWERTOOLS_METRICS_NAMESPACE": "InferCraneLocal",
            "POWERTOOLS_TRACE_DISABLED": "true",
        })
        os.environ.pop("AWS_SESSION_TOKEN", None)
        import boto3

        session = boto3.session.Session(region_name=REGION)
        physical = resources.create(self.template, session, aws, REGION)
        resolve = physical.resolver(self.template.parameters, REGION,
                                    self.template.raw.get("Conditions"))
        cfn = iam.translate(self.template, REGION)
        iam_client = session.client("iam", endpoint_url=aws)
        roles = iam.create_roles(iam_client, session.client("sts", endpoint_url=aws), cfn, resolve)
        self.operator = iam.create_operator(iam_client)
        # From here this process (provisioning, the demo's and qualification's own reads) acts
        # as the operator: moto will refuse the throwaway credentials.
        os.environ.update(self.operator.env())
        from infercrane.adapters.aws_session import forget_shared_session

        forget_shared_session()  # one made earlier in this process keeps the credentials it found
        self.env = resources.environment(self.template, physical, REGION)
        self._declared = set(self.env)  # every variable some function is deployed with
        self.env["INFERCRANE_AWS_ENDPOINT_URL"] = aws
        extensions: dict[str, str] = {}
        for name, starter in EXTENSIONS.items():
            log.info("starting local extension %s", name)
            extensions.update(starter(self))
        self.env.update(extensions)
        os.environ.update(self.env)
        # The template's LogLevel is for AWS; locally the caller chooses.
        os.environ["POWERTOOLS_LOG_LEVEL"] = self.log_level

        from infercrane.bootstrap import Container, reset_container
        from infercrane.settings import Settings

        reset_container(Container(Settings.from_env(os.environ)))
        self._provision()
        knobs = self._local_knobs(caller, extensions, aws)
        sink = LogSink(keep_metrics=self.log_level == "DEBUG")
        self.pools = {}
        for lid, spec in self.template.functions.items():
            declared = {k: str(resolve(v)) for k, v in iam.function_environment(cfn, lid).items()}
            self.pools[lid] = FunctionPool(
                spec, artifacts.artifact(self.template_path, spec), physical.arns[lid],
                self.function_env(spec, declared, knobs, roles[lid]), self.pool_size, sink)
        # Every request from now on is authenticated and authorized against moto's IAM.
        iam.report_denials({role: lid for lid, role in iam.function_roles(cfn).items()})
        iam.enforce(aws)
        self._authorizing = True

        operator_sqs = self.aws_client("sqs")
        for source in self.template.sqs_sources:
            # Lambda's event source mapping polls with the function's role (SAM attaches
            # AWSLambdaSQSQueueExecutionRole); the shortened retry delay is a local liberty.
            sqs = boto3.session.Session(**roles[source.function].client_kwargs()).client(
                "sqs", endpoint_url=aws, region_name=REGION)
            poller = SqsPoller(source, self.pools[source.function], sqs,
                               physical.refs[source.queue], physical.arns[source.queue], REGION,
                               self.stop_event, self.retry_delay_s, operator_sqs)
            poller.start()
            self.pollers.append(poller)
        self.scheduler = Scheduler(self.template.schedules, self.pools, REGION, self.stop_event)
        if self.run_schedules:
            self.scheduler.start()
        gateway = Gateway(self.template.routes, self.pools, self.template.authorizer,
                          self.admin_key, stage=str(self.template.parameters.get("StageName")),
                          local_routes={"/_local/tick/": self._tick,
                                        "/_local/counts": self._counts},
                          iam=SigV4Verifier([self.iam_principal], REGION)
                          if self.iam_principal is not None else None,
                          throttle=None if self.template.tenant_throttle is None
                          else TokenBuckets(*self.template.tenant_throttle),
                          authorizer_ttl_s=self.template.authorizer_ttl_s, counts=self.counts)
        self._server, _ = serve(gateway, self.host, self.port)
        threading.Thread(target=self._reap_idle, name="reaper", daemon=True).start()
        # Start the API's and authorizer's environments now, in parallel (`wait_warm` joins
        # them): a stack that says it is ready answers its first requests without a cold start
        # (issue 27: an import started at ready shared the cores with these starts).
        self._warming = [threading.Thread(target=self.pools[lid].warm, name=f"warm-{lid}",
                                          daemon=True)
                         for lid in sorted({r.function for r in self.template.routes}
                                           | {self.template.authorizer or ""}) if lid]
        for thread in self._warming:
            thread.start()
        return self

    def wait_warm(self, timeout_s: float = 60.0,
                  stopping: threading.Event | None = None) -> list[str]:
        """Wait for the environments `start` began (an init that fails is logged by its pool and
        the function starts on first use instead), or until `stopping` is set; the functions
        with one warm environment."""
        deadline = time.monotonic() + timeout_s
        for thread in self._warming:
            # In short slices: a stop asked for meanwhile (SIGTERM sets `stopping` between
            # them) ends the wait at once.
            while thread.is_alive() and time.monotonic() < deadline:
                if stopping is not None and stopping.is_set():
                    return []
                thread.join(min(0.1, max(0.0, deadline - time.monotonic())))
        return sorted(lid for lid, pool in self.pools.items() if pool.warm_environments)

    def _reap_idle(self) -> None:
        """Every REAP_EVERY_S: environments idle over ENV_IDLE_S stop (the API's and the
        authorizer's last one stays warm, as at boot), and this process hands the heap it freed
        back to the system, so the stack's memory follows its load down, not only up."""
        keep_warm = {r.function for r in self.template.routes} | {self.template.authorizer or ""}
        while not self.stop_event.wait(REAP_EVERY_S):
            for lid, pool in self.pools.items():
                pool.reap(ENV_IDLE_S, keep=1 if lid in keep_warm else 0)
            _trim_heap()

    def _local_knobs(self, caller: dict[str, str], extensions: dict[str, str],
                     aws: str) -> dict[str, str]:
        """What the local stack adds to the template's variables: its AWS endpoint, the caller's
        log level, the emulators' endpoints, and the caller's own INFERCRANE_/POWERTOOLS_
        settings that no function declares (local tuning such as INFERCRANE_TRACE_SYNC_LIMIT).
        A variable the template declares never comes from the caller: a function that lacks
        one fails here as on AWS."""
        knobs = {k: v for k, v in caller.items()
                 if k.startswith(("INFERCRANE_", "POWERTOOLS_")) and k not in self._declared}
        knobs.update(extensions)
        knobs.update({"INFERCRANE_AWS_ENDPOINT_URL": aws, "POWERTOOLS_LOG_LEVEL": self.log_level,
                      "POWERTOOLS_TRACE_DISABLED": "true"})
        return knobs

    def function_env(self, spec: FunctionSpec, declared: dict[str, str], knobs: dict[str, str],
                     role: iam.Credentials) -> dict[str, str]:
        """What an execution environment sees: exactly the variables the template gives the
        function (Globals and its own, resolved to local resources), the local knobs (a knob
        the template declares only where the function declares it), its role's credentials
        and Lambda's own variables; nothing else from this process (no PYTHONPATH, no venv)."""
        env = dict(declared)
        env.update({k: v for k, v in knobs.items() if k in declared or k not in self._declared})
        env.update(role.env())
        env.update({
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "TZ": "UTC",
            "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION,
            "AWS_LAMBDA_FUNCTION_NAME": spec.logical_id,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST", "_HANDLER": spec.handler,
            "LAMBDA_TASK_ROOT": str(artifacts.artifact(self.template_path, spec).paths[0]),
        })
        return env

    def aws_client(self, service: str) -> Any:
        """A client of the local AWS endpoint with the operator's credentials."""
        import boto3

        if self.operator is None:
            raise RuntimeError("the local stack is not started")
        return boto3.session.Session(**self.operator.client_kwargs()).client(
            service, endpoint_url=self.aws_endpoint, region_name=REGION)

    def _provision(self) -> None:
        from infercrane.bootstrap import get_container
        from infercrane.clock import utcnow

        tenancy = get_container().tenancy
        for name in self.tenants:
            self.api_keys[name] = tenancy.ensure_tenant(name, utcnow()).raw_key

    def _tick(self, name: str, _body: bytes) -> tuple[int, Any]:
        try:
            spec = self.template.function(name)
        except KeyError:
            return 404, {"error": {"code": "not_found", "field": "function",
                                   "message": "No such function in template.yaml."}}
        schedules = [s for s in self.template.schedules if s.function == spec.logical_id]
        if not schedules:
            return 422, {"error": {"code": "not_scheduled", "field": "function",
                                   "message": "That function has no schedule."}}
        try:
            result = self.scheduler.fire(schedules[0])
        except FunctionError as exc:
            return 502, {"error": {"code": "function_error", "field": None,
                                   "message": f"{exc.error_type}: {exc.message}"}}
        return 200, {"function": spec.logical_id, "result": result}

    def _counts(self, _name: str, _body: bytes) -> tuple[int, Any]:
        if self.counts is None:
            return 404, {"error": {"code": "not_counting", "field": None,
                                   "message": "Start the stack with --count-requests."}}
        return 200, self.counts.snapshot({
            pool.spec.logical_id: {"invocations": pool.invocations, "cpu_s": pool.cpu_s,
                                   "memory_mb": pool.spec.memory_mb}
            for pool in self.pools.values()})

    def drain(self, timeout_s: float = 30.0) -> bool:
        """Wait until every queue consumer has found its queue empty twice in a row (a consumer
        may produce into another queue meanwhile). For tests and the demo."""
        import time

        deadline = time.monotonic() + timeout_s
        for _ in range(2):
            for p in self.pollers:
                p.idle.clear()
            if not all(p.idle.wait(max(0.0, deadline - time.monotonic())) for p in self.pollers):
                return False
        return True

    def stop(self) -> None:
        self.stop_event.set()
        # Environments first: an invocation in flight ends now instead of at its timeout.
        for pool in self.pools.values():
            pool.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        # The pollers are not joined: one may be in a long poll (LONG_POLL_S) that nothing ends
        # sooner; they are daemon threads, and each ends when its poll returns to the stop event
        # set (or fails against the stopped moto server). Messages stay in moto, which stops now.
        if self._moto is not None:
            if self._authorizing:  # through the server, so before it stops
                iam.relax(self.aws_endpoint)
                self._authorizing = False
            self._moto.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def ready_line(stack: LocalStack) -> str:
    return json.dumps(stack.ready_document())
