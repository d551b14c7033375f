from __future__ import annotations

import pytest
from click.testing import CliRunner

from infercrane.cli.main import cli, hoist_global_options


def test_global_options_after_the_subcommand_move_to_the_front():
    argv = ["admin", "dlq", "list", "--endpoint", "http://x", "--output=json"]
    assert hoist_global_options(argv) == ["--endpoint", "http://x", "--output=json",
                                          "admin", "dlq", "list"]


def test_arguments_after_double_dash_are_left_alone():
    argv = ["capture", "import", "--", "--output", "file"]
    assert hoist_global_options(argv) == argv


@pytest.mark.parametrize("command", [[], ["local"], ["admin"], ["local", "serve"]])
def test_help_teaches_with_examples(command):
    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.output
    if not command:
        assert "Examples:" in result.output and "Exit codes" in result.output


def test_a_command_that_exits_with_a_code_makes_the_process_exit_with_it(monkeypatch):
    import click

    from infercrane.cli import main as cli_main

    @click.group()
    def group() -> None:
        pass

    @group.command("fail")
    @click.pass_context
    def fail(ctx: click.Context) -> None:
        ctx.exit(5)  # e.g. `qualify` or `trace verify` reporting a failed check

    monkeypatch.setattr(cli_main, "cli", group)
    with pytest.raises(SystemExit) as done:
        cli_main.main(["fail"])
    assert done.value.code == 5


def test_every_command_is_named_like_the_module_that_defines_it():
    import importlib

    from infercrane.cli.main import COMMANDS

    for name in COMMANDS:
        assert importlib.import_module(f"infercrane.cli.{name}").command.name == name
    listed = CliRunner().invoke(cli, ["--help"]).output
    assert all(f"  {name} " in listed for name in COMMANDS)


def _run_in_a_fresh_interpreter(argv: list[str]) -> tuple[str, list[str]]:
    """(what `infercrane ARGV` printed, the infercrane.cli modules it imported)."""
    import json
    import subprocess
    import sys

    probe = ("import json, sys; from infercrane.cli.main import main\n"
             f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
             "print(json.dumps([m for m in sys.modules if m.startswith('infercrane.cli.')]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    *printed, loaded = done.stdout.strip().splitlines()
    return "\n".join(printed), json.loads(loaded)


def test_the_command_list_shows_whole_summaries_without_importing_a_command():
    from infercrane.cli.main import COMMANDS

    printed, loaded = _run_in_a_fresh_interpreter(["--help"])
    assert set(loaded) <= {"infercrane.cli.main", "infercrane.cli.client"}
    for name, summary in COMMANDS.items():  # whole, never cut with "..." at the column's end
        assert f"  {name}" in printed and summary in " ".join(printed.split())


def test_a_call_imports_only_the_command_it_runs():
    _, loaded = _run_in_a_fresh_interpreter(["cache", "--help"])
    assert "infercrane.cli.cache" in loaded
    assert not {"infercrane.cli.replay", "infercrane.cli.capture", "infercrane.cli.report",
                "infercrane.cli.qualify", "infercrane.cli.local"} & set(loaded)
