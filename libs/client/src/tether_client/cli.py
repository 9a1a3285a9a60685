"""The `tether` command line (Typer + Rich): the root app, the table of its commands
(`LAZY`: each imported only when used, `tether_client.lazy`), and `main`, which turns
every expected failure into one line, a hint and an exit code (the table is in
`tether_client.exits` and at the end of `tether --help`).

    tether up | status | run PROMPT | chat
    tether runs list|show|follow|stop|message      tether approvals list|show|approve|deny|edit|respond
    tether tools list|run    tether policy explain|replay|suggest    tether audit verify    tether outputs download
    tether skills list|validate    tether agents …    tether tokens …    tether webhooks …
    tether models list|show|set|probe    tether kill --tenant T | --agent A | --all | --lift | --list
    tether documents add|list|show|remove
    tether schedules add|list|show|pause|resume|remove
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Callable
from typing import Annotated, Any, Literal

import typer

from tether_client.command import SERVER_MODULES, missing_extra
from tether_client.exits import EXIT_CODES_HELP, ExitCode
from tether_client.fields import SELECTED
from tether_client.lazy import LazyCommand, LazyGroup

__all__ = ["LAZY", "app", "main"]

app = typer.Typer(
    cls=LazyGroup,
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
        from tether_client.console import err

        err(why)
        raise typer.Exit(ExitCode.FAILED)
    from tether_client.up import run_up  # the embedded servers load only for `up`

    if code := run_up(log_format, log_level):
        raise typer.Exit(code)


# Every command but `up`, imported only when it runs, completes or shows its help
# (`tether_client.lazy`): each entry is the summary `tether --help` lists (a test checks it
# starts the command's own help) and where the command lives.


def _from(module: str, attribute: str) -> Callable[[], Any]:
    """A loader: `module.attribute` (a Typer sub-app or a command's function)."""
    return lambda: getattr(importlib.import_module(f"tether_client.{module}"), attribute)


def _policy() -> Any:
    from tether_client import policy_cli, tools_cli

    tools_cli.policy_app.command("replay")(policy_cli.replay_command)
    tools_cli.policy_app.command("suggest")(policy_cli.suggest_command)
    return tools_cli.policy_app


LAZY: dict[str, LazyCommand] = {
    "run": LazyCommand(
        "Start a run and stream its events to the end", _from("runs_cli", "run_command")
    ),
    "status": LazyCommand(
        "Each service's health and replicas, queue depths", _from("status", "status_command")
    ),
    "chat": LazyCommand("Talk to an agent", _from("chat_cli", "chat_command")),
    "runs": LazyCommand("Inspect, follow, stop and message runs", _from("runs_cli", "app")),
    "approvals": LazyCommand(
        "Approval requests: list, show, approve, deny, edit, respond",
        _from("ops_cli", "approvals_app"),
    ),
    "tools": LazyCommand(
        "The tool catalogue, and running one tool by hand", _from("tools_cli", "tools_app")
    ),
    "policy": LazyCommand("What the gates decide, and why", _policy),
    "audit": LazyCommand("Check audit trails", _from("ops_cli", "audit_app")),
    "outputs": LazyCommand(
        "Stored large results (operator token)", _from("tools_cli", "outputs_app")
    ),
    "skills": LazyCommand(
        "List the brain's skills, or validate skill folders", _from("skills_cli", "app")
    ),
    "agents": LazyCommand(
        "Agents as resources: list, show, apply, delete", _from("agents_cli", "app")
    ),
    "tokens": LazyCommand("Principals' bearer tokens (admin)", _from("tokens_cli", "app")),
    "webhooks": LazyCommand(
        "Where approval and run notices are sent (operators, admins)", _from("webhooks_cli", "app")
    ),
    "models": LazyCommand("Model profiles: how each model is prompted", _from("models_cli", "app")),
    "kill": LazyCommand(
        "Stop every running run of a tenant, an agent or all", _from("kill_cli", "kill_command")
    ),
    "quota": LazyCommand(
        "Tenants' quotas: tokens, cost, runs a minute, concurrent runs",
        _from("quotas_cli", "app"),
    ),
    "hooks": LazyCommand(
        "Lifecycle hooks: checks a tenant runs before and after tools, before answers",
        _from("hooks_cli", "app"),
    ),
    "tool-servers": LazyCommand(
        "A tenant's own MCP tool servers: add, list, remove", _from("tool_servers_cli", "app")
    ),
    "documents": LazyCommand(
        "Documents runs retrieve: add, list, show, remove", _from("documents_cli", "app")
    ),
    "schedules": LazyCommand(
        "Runs started on a clock: add, list, show, pause, resume, remove",
        _from("schedules_cli", "app"),
    ),
    "memory": LazyCommand(
        "What runs remember across threads: list, search, add, forget",
        _from("memory_cli", "app"),
    ),
}
LazyGroup.lazy = LAZY


def main(argv: list[str] | None = None) -> int:
    """Run `tether` with `argv` (default: the process's) and return its exit code.
    Typer's standalone mode shows usage errors (exit 2) and turns Ctrl-C into 130; every
    command ends in `typer.Exit` with its code (`session.blocking`)."""
    command = typer.main.get_command(app)
    SELECTED.set(())  # a command without `-o` inherits no earlier one's fields
    try:
        command.main(args=argv, prog_name="tether", standalone_mode=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        from tether_client.console import err

        err(str(exc.code))
        return ExitCode.FAILED
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
