"""The embedded local stack: moto's server, the template's resources, tenants, the HTTP gateway,
queue consumers and schedules, in one process (`infercrane local serve`)."""

from __future__ import annotations

import io
import json
import logging
import os
import secrets
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infercrane.local import resources
from infercrane.local.gateway import Gateway, GatewayServer, serve
from infercrane.local.runtime import FunctionPool
from infercrane.local.template import StackTemplate, load
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


class FunctionOutput(io.TextIOBase):
    """Functions print logs and EMF metric lines to stdout, as Lambda expects. Locally, stdout
    belongs to the command that started the stack (its ready line, the demo's narration), so what
    the stack's worker threads write goes to stderr and only the main thread writes to stdout."""

    def __init__(self, out: Any, err: Any):
        self.out, self.err = out, err

    def _target(self) -> Any:
        return self.out if threading.current_thread() is threading.main_thread() else self.err

    def write(self, text: str) -> int:
        return int(self._target().write(text))

    def flush(self) -> None:
        self.out.flush()
        self.err.flush()

    def isatty(self) -> bool:
        return bool(self.out.isatty())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.out, "encoding", "utf-8"))


# Extra local-only components (emulators) register here: name -> starter(stack) -> env vars.
EXTENSIONS: dict[str, Callable[[LocalStack], dict[str, str]]] = {}


@dataclass
class LocalStack:
    template_path: Path
    host: str = "127.0.0.1"
    port: int = 0
    tenants: list[str] = field(default_factory=lambda: ["demo"])
    admin_key: str = ""
    retry_delay_s: int = 1
    run_schedules: bool = True
    pool_size: int = 8
    log_level: str = "WARNING"

    def __post_init__(self) -> None:
        self.admin_key = self.admin_key or "icadmin_" + secrets.token_urlsafe(24)
        self.stop_event = threading.Event()
        self.api_keys: dict[str, str] = {}
        self.pools: dict[str, FunctionPool] = {}
        self.pollers: list[SqsPoller] = []
        self.env: dict[str, str] = {}
        self._moto: Any = None
        self._server: GatewayServer | None = None
        self._stdout: Any = None
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
        return {"endpoint": self.endpoint, "aws_endpoint": self.aws_endpoint,
                "tenants": dict(self.api_keys), "admin_key": self.admin_key}

    def start(self) -> LocalStack:
        from moto.server import ThreadedMotoServer

        from infercrane.local import moto_query

        moto_query.install()  # moto's Query walks the whole table on every page

        # Before any handler module loads: Powertools binds its log stream at import.
        self._stdout = sys.stdout
        sys.stdout = FunctionOutput(sys.stdout, sys.stderr)

        self._moto = ThreadedMotoServer(ip_address=self.host, port=0, verbose=False)
        self._moto.start()
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request lines
        aws = self.aws_endpoint
        # Every SDK in this process (and every handler) talks to moto with throwaway credentials.
        os.environ.update({
            "AWS_ENDPOINT_URL": aws, "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION,
            "POWERTOOLS_METRICS_NAMESPACE": "InferCraneLocal",
            "POWERTOOLS_TRACE_DISABLED": "true",
        })
        import boto3

        session = boto3.session.Session(region_name=REGION)
        physical = resources.create(self.template, session, aws, REGION)
        self.env = resources.environment(self.template, physical)
        self.env["INFERCRANE_AWS_ENDPOINT_URL"] = aws
        for name, starter in EXTENSIONS.items():
            log.info("starting local extension %s", name)
            self.env.update(starter(self))
        os.environ.update(self.env)
        # The template's LogLevel is for AWS; locally the caller chooses.
        os.environ["POWERTOOLS_LOG_LEVEL"] = self.log_level

        from infercrane.bootstrap import Container, reset_container
        from infercrane.settings import Settings

        reset_container(Container(Settings.from_env(os.environ)))
        root = self.template_path.parent
        self.pools = {lid: FunctionPool(spec, root, physical.arns[lid], self.pool_size)
                      for lid, spec in self.template.functions.items()}
        self._provision()

        sqs = session.client("sqs", endpoint_url=aws)
        for source in self.template.sqs_sources:
            poller = SqsPoller(source, self.pools[source.function], sqs,
                               physical.refs[source.queue], physical.arns[source.queue], REGION,
                               self.stop_event, self.retry_delay_s)
            poller.start()
            self.pollers.append(poller)
        self.scheduler = Scheduler(self.template.schedules, self.pools, REGION, self.stop_event)
        if self.run_schedules:
            self.scheduler.start()
        gateway = Gateway(self.template.routes, self.pools, self.template.authorizer,
                          self.admin_key, stage=str(self.template.parameters.get("StageName")),
                          local_routes={"/_local/tick/": self._tick})
        self._server, _ = serve(gateway, self.host, self.port)
        # Load the API and authorizer environments now so the first request is not a cold start.
        for lid in {r.function for r in self.template.routes} | {self.template.authorizer or ""}:
            if lid:
                self.pools[lid].warm()
        return self

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
        result = self.scheduler.fire(schedules[0])
        return 200, {"function": spec.logical_id, "result": result}

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
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for p in self.pollers:
            p.join(timeout=5)
        if self._moto is not None:
            self._moto.stop()
        if self._stdout is not None:
            sys.stdout = self._stdout
            self._stdout = None

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def ready_line(stack: LocalStack) -> str:
    return json.dumps(stack.ready_document())
