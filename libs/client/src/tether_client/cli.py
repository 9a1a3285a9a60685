"""The `tether` command line (Typer + Rich): the root app, its sub-apps, and `main`, which
turns every expected failure into one line, a hint and an exit code (the table is in
`tether_client.exits` and at the end of `tether --help`).

    tether up | status | run PROMPT | chat
    tether runs list|show|follow|stop|message      tether approvals list|show|approve|deny
    tether tools list|run    tether policy explain|replay|suggest    tether audit verify    tether outputs download
    tether skills list|validate    tether agents …    tether tokens …    tether webhooks …
    tether models list|show|set|probe
"""

from __future__ import annotations

import importlib.metadata
import sys
from typing import Annotated, Literal

import typer

from tether_client import (
    agents_cli,
    chat_cli,
    models_cli,
    policy_cli,
    runs_cli,
    skills_cli,
    status,
    tokens_cli,
    tools_cli,
    webhooks_cli,
)
from tether_client.command import SERVER_MODULES, missing_extra
from tether_client.console import err
from tether_client.exits import EXIT_CODES_HELP, ExitCode
from tether_client.ops_cli import approvals_app, audit_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="tether",
    help="Drive a Tether system: start it, run prompts, watch runs, decide approvals.\n\n"
    'Example: tether up, then in another terminal: tether run "what time is it in Tokyo?"',
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def version() -> str:
    return importlib.metadata.version("tether-client")


def show_version(value: bool) -> None:
    if value:
        typer.echo(f"tether {version()}")
        raise typer.Exit()


@app.callback()
def root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=show_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
) -> None:
    """Drive a Tether system."""


@app.command("up")
def up(
    log_format: Annotated[
        Literal["auto", "text", "json"],
        typer.Option(
            help="Service logs: text for people, json for machines; auto: text on a terminal.",
        ),
    ] = "auto",
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"] | None,
        typer.Option(
            help="Services' log level (default TETHER_LOG_LEVEL, else info); debug also "
            "shows stacks and a failure's traceback.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Start NATS, PostgreSQL, every service (and the local model with
    TETHER_PROVIDER=local) on this machine; Ctrl-C stops everything it started. One per
    TETHER_HOME: a second exits at once (code 6) naming the first.

    Example: tether up --log-format json > tether.log
    """
    if (why := missing_extra("server", SERVER_MODULES)) is not None:
        err(why)
        raise typer.Exit(ExitCode.FAILED)
    from tether_client.up import run_up  # the embedded servers load only for `up`

    if code := run_up(log_format, log_level):
        raise typer.Exit(code)


app.command("run")(runs_cli.run_command)
app.command("status")(status.status_command)
app.command("chat")(chat_cli.chat_command)
app.add_typer(runs_cli.app, name="runs")
app.add_typer(approvals_app, name="approvals")
app.add_typer(tools_cli.tools_app, name="tools")
app.add_typer(tools_cli.policy_app, name="policy")
tools_cli.policy_app.command("replay")(policy_cli.replay_command)
tools_cli.policy_app.command("suggest")(policy_cli.suggest_command)
app.add_typer(audit_app, name="audit")
app.add_typer(tools_cli.outputs_app, name="outputs")
app.add_typer(skills_cli.app, name="skills")
app.add_typer(agents_cli.app, name="agents")
app.add_typer(tokens_cli.app, name="tokens")
app.add_typer(webhooks_cli.app, name="webhooks")
app.add_typer(models_cli.app, name="models")


def main(argv: list[str] | None = None) -> int:
    """Run `tether` with `argv` (default: the process's) and return its exit code.
    Typer's standalone mode shows usage errors (exit 2) and turns Ctrl-C into 130; every
    command ends in `typer.Exit` with its code (`session.blocking`)."""
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="tether", standalone_mode=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        err(str(exc.code))
        return ExitCode.FAILED
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
