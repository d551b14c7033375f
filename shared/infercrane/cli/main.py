"""`infercrane`: the command line of the replay and capacity intelligence service.

Global options may stand before or after the subcommand; exit codes follow the conventions:
0 ok, 1 service or runtime failure, 2 bad usage or input, 3 refused by a safety rule, 4 not found,
5 verification failed.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass

import click

from infercrane import __version__
from infercrane.cli.client import ApiClient, CliError

GLOBAL_OPTIONS = {"--endpoint": "endpoint", "--api-key": "api_key", "--output": "output",
                  "--admin-key": "admin_key"}
# Each capability area contributes one click command or group from infercrane.cli.<module>,
# named like its module (a unit test checks both), with its one-line summary for `infercrane
# --help`. The summary lives here, not in the module, so listing the commands imports none of
# them (all thirteen cost ~0.4 s); the module's docstring is the command's own --help.
COMMANDS = {
    "admin": "Operate the service: tenants, keys, HMAC rotation, DLQs.",
    "cache": "Artifact-cache state, as the infrastructure adapters observe it.",
    "capacity": "This tenant's capacity history: success rate, failures, durations.",
    "capture": "Capture the shape of inference traffic (never its content).",
    "lifecycle": "Lifecycle attempts (create/start/scale/update of GPU deployments).",
    "local": "Run the service on this machine from its built artifacts.",
    "model": "Model identity.",
    "prefetch": "Ask an infrastructure adapter to prefetch a model where it runs.",
    "qualify": "Qualify the service: one row per promise and an evidence document.",
    "replay": "Build a replay trace of a deployment; --execute runs AIPerf on it.",
    "report": "Write an HTML report of a deployment's traffic and evidence.",
    "revision": "Deployment revisions: the endpoints replay executions run against.",
    "trace": "Inspect, verify, download and export stored replay traces.",
}

EPILOG = """\b
Examples:
  infercrane local serve --tenant demo --ready-file /tmp/ready.json
  export INFERCRANE_ENDPOINT=http://127.0.0.1:8080 INFERCRANE_API_KEY=ick_...
  infercrane capture import trace.csv --deployment coder-production --format azure-csv
  infercrane replay coder-production --window 24h --max-requests 1000 --output json
  infercrane capacity --window 720h --group-by adapter,gpu

Exit codes: 0 ok, 1 service/runtime failure, 2 bad usage or input,
3 refused by a safety rule, 4 not found, 5 verification failed (trace verify)."""


@dataclass
class CliContext:
    endpoint: str
    api_key: str | None
    output: str
    admin_key: str | None

    def api(self) -> ApiClient:
        return ApiClient(self.endpoint, self.api_key)

    def admin(self) -> ApiClient:
        """A local stack's admin key when one is given; otherwise SigV4 with the caller's AWS
        credentials, as the deployed stack's IAM-authorized admin routes require."""
        if self.admin_key:
            return ApiClient(self.endpoint, self.admin_key)
        if not self.endpoint:
            return ApiClient(self.endpoint, None)  # its request() explains the missing endpoint
        from infercrane.cli.sigv4 import SigV4Signer

        return ApiClient(self.endpoint, None, signer=SigV4Signer(self.endpoint))


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move global options found after the subcommand to the front, so click sees them."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        name, eq, _ = arg.partition("=")
        if name in GLOBAL_OPTIONS:
            if eq:
                front.append(arg)
            elif i + 1 < len(argv):
                front.extend([arg, argv[i + 1]])
                i += 1
            else:
                rest.append(arg)  # let click report the missing value
        else:
            rest.append(arg)
        i += 1
    return front + rest


class LazyGroup(click.Group):
    """Imports a command's module only when that command is used, so a call pays only for the
    capability it runs: importing every module cost ~0.6 s per invocation."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        command: click.Command = importlib.import_module(f"infercrane.cli.{cmd_name}").command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl(sorted(COMMANDS.items()))


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"],
                                               "max_content_width": 100})
@click.option("--endpoint", envvar="INFERCRANE_ENDPOINT", default="", metavar="URL",
              help="Service base URL (env INFERCRANE_ENDPOINT).")
@click.option("--api-key", envvar="INFERCRANE_API_KEY", default=None, metavar="KEY",
              help="Tenant API key (env INFERCRANE_API_KEY).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table",
              envvar="INFERCRANE_OUTPUT", show_default=True,
              help="table for people; json prints exactly the API's JSON on stdout.")
@click.option("--admin-key", envvar="INFERCRANE_ADMIN_KEY", default=None, metavar="KEY",
              help="Admin key of a local stack (env INFERCRANE_ADMIN_KEY). Without it, admin "
              "commands sign with your AWS credentials (SigV4).")
@click.version_option(__version__, prog_name="infercrane")
@click.pass_context
def cli(ctx: click.Context, endpoint: str, api_key: str | None, output: str,
        admin_key: str | None) -> None:
    """InferCrane replay and capacity intelligence.

    Capture the shape of inference traffic (never its content), build canonical replay traces,
    run honest AIPerf approximations, and read this tenant's capacity history and artifact-cache
    state.
    """
    ctx.obj = CliContext(endpoint, api_key, output, admin_key)


def main(argv: list[str] | None = None) -> None:
    args = hoist_global_options(list(sys.argv[1:] if argv is None else argv))
    try:
        # Without standalone mode click *returns* the code of `ctx.exit(code)` rather than raising.
        returned = cli.main(args=args, prog_name="infercrane", standalone_mode=False)
    except CliError as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2 if isinstance(exc, click.UsageError | click.BadParameter) else exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(returned if isinstance(returned, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
