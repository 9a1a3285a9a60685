"""What a `tether` start costs and what it prints for programs, without a system: `--help`
and a read command import only what they use (a bound on modules, not on time); the
lazily loaded commands are listed by summaries that start their own help; completion of
ids completes nothing, silently, when the system is down; and `-o` selects fields and
writes JSON Lines and bare values as documented (`tether_client.fields`).

Issue 29, item 7. The system's side (ids completed from the server, a followed run as
JSON Lines) is in `test_cli_system.py`.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tether_client.cli import LAZY, app
from tether_client.complete import offer
from tether_client.console import Format, OutputOption, emit
from tether_client.fields import MAX_PATHS, parse_selection
from tether_client.lazy import loaded
from tether_client.server.embedded import free_port

TETHER = Path(sys.executable).parent / "tether"

# What a start must not pay for unless the command uses it. The service stack never, for
# a client command; the HTTP client and the wire models not for `--help`.
SERVICE_STACK = (
    "fastapi",
    "uvicorn",
    "sqlalchemy",
    "asyncpg",
    "nats",
    "pydantic_settings",
    "tether_client.up",
)
WIRE = ("httpx", "pydantic", "tether_common.messages", "tether_client.client", "yaml")
# What listing runs does not use: other resources' models, the approvals client, YAML.
NOT_FOR_RUNS = (
    "tether_common.messages.agents",
    "tether_common.messages.threads",
    "tether_common.messages.identity",
    "tether_common.messages.approvals",
    "tether_client.ops_cli",
    "yaml",
)
OTHER_GROUPS = (
    "tether_client.chat_cli",
    "tether_client.agents_cli",
    "tether_client.models_cli",
    "tether_client.webhooks_cli",
    "tether_client.tokens_cli",
    "tether_client.skills_cli",
    "tether_client.policy_cli",
    "tether_client.tools_cli",
)


def dead_env(home: Path) -> dict[str, str]:
    """A user whose system is down: every address refuses."""
    dead = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return env | {
        "TETHER_HOME": str(home),
        "TETHER_API_URL": dead,
        "TETHER_APPROVALS_URL": dead,
        "TETHER_OPERATOR_TOKEN": "a-token-nobody-checks",
    }


def imported_by(home: Path, *argv: str) -> set[str]:
    """The modules a `tether` process has loaded when the command ends, as the entry point
    runs it (the same `main` the console script calls)."""
    probe = (
        "import sys\n"
        "from tether_client.command import main\n"
        f"code = main({list(argv)!r})\n"
        "sys.stderr.write('\\n'.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=dead_env(home),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return set(done.stderr.splitlines())


def loaded_any(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules for n in names if m == n or m.startswith(f"{n}."))


def test_help_imports_neither_the_wire_nor_the_service_stack(tmp_path: Path) -> None:
    modules = imported_by(tmp_path, "--help")
    assert "tether_client.cli" in modules  # the probe ran the command line
    assert loaded_any(modules, SERVICE_STACK + WIRE + OTHER_GROUPS) == []
    assert loaded_any(modules, ("tether_client.runs_cli", "tether_client.ops_cli")) == []


def test_a_read_command_imports_its_own_group_only(tmp_path: Path) -> None:
    modules = imported_by(tmp_path, "runs", "list")
    assert "tether_client.runs_cli" in modules
    assert loaded_any(modules, SERVICE_STACK + OTHER_GROUPS + NOT_FOR_RUNS) == []


@pytest.mark.parametrize("name", list(LAZY))
def test_each_lazy_command_is_listed_by_the_start_of_its_own_help(name: str) -> None:
    command = loaded(name, LAZY[name].load)
    assert command.name == name
    assert (command.help or "").startswith(LAZY[name].summary), (name, command.help)


def test_help_lists_every_command_by_its_summary() -> None:
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    for name, entry in LAZY.items():
        assert f" {name} " in shown
        assert entry.summary in shown


def complete(home: Path, words: str, **env: str) -> subprocess.CompletedProcess[str]:
    """What bash's completion script asks `tether` for the last of `words`."""
    cword = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    return subprocess.run(
        [str(TETHER)],
        env=dead_env(home)
        | {"_TETHER_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": cword}
        | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "words",
    [
        "tether runs show ",
        "tether runs follow run_",
        "tether approvals approve ",
        "tether approvals show apr_",
        "tether audit verify ",
    ],
)
def test_completing_an_id_with_the_system_down_is_silent(tmp_path: Path, words: str) -> None:
    asked = complete(tmp_path, words)
    assert (asked.returncode, asked.stderr) == (0, "")
    expected = ["last"] if words.endswith(("show ", "follow ", "verify ")) else []
    assert asked.stdout.split() == expected


HOSTILE = [
    "$(touch /tmp/owned)",
    "`id`",
    "'; rm -rf ~; '",
    '"quoted" \\ back',
    "line\nbreak\r",
    "ansi \x1b]0;title\x07 \x9b2J",
    "bidi \u202egpj.sh zero\u200bwidth",
    "colon:separated:help",
    "(( parens ))",
]


@pytest.mark.parametrize("said", HOSTILE)
def test_what_completion_offers_cannot_reach_the_shell(said: str) -> None:
    """The shell evaluates what a completion prints (zsh `eval`s it), and the server says
    what is offered: only ids made of id characters, beside descriptions of plain ones."""
    offered = offer(
        [("run_ab12", f"running {said}"), (f"run_ab{said}", "x"), ("apr_1", said)],
        "ab",
        "run",
    )
    assert [value for value, _ in offered] == ["run_ab12"]
    [(_, described)] = offered
    assert re.fullmatch(r"[A-Za-z0-9 _.,/@+=-]*", described), described
    assert described.startswith("running")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("json=", "no field after 'json='"),
        ("json=a..b", "is not a field path"),
        ("jsonl=run id", "is not a field path"),
        ("json=a,,b", "is not a field path"),
        ("json=$(id)", "is not a field path"),
        ("json=" + ",".join(f"f{i}" for i in range(MAX_PATHS + 1)), f"at most {MAX_PATHS}"),
    ],
)
def test_a_bad_field_list_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why.replace("$", r"\$").replace("(", r"\(")):
        parse_selection(text)


def shown(output: str, data: Any) -> str:
    """`data` as `emit` writes it for `-o output`, parsed as the option parses it."""
    probe = typer.Typer()
    out = io.StringIO()

    @probe.command()
    def show(output: OutputOption = Format.table) -> None:
        with redirect_stdout(out):
            emit(data, output)

    done = CliRunner().invoke(probe, ["-o", output])
    assert done.exit_code == 0, done.output
    return out.getvalue()


RUNS = [
    {"run_id": "run_1", "status": "completed", "usage": {"steps": 2}, "steps": [{"tool": "a"}]},
    {"run_id": "run_2", "status": "failed", "usage": {"steps": 5}, "steps": []},
]


def test_jsonl_is_one_value_a_line() -> None:
    lines = shown("jsonl", RUNS).splitlines()
    assert [json.loads(line) for line in lines] == RUNS
    assert json.loads(shown("jsonl", RUNS[0])) == RUNS[0]  # one record: one line


def test_fields_select_from_each_record() -> None:
    picked = shown("json=run_id,usage.steps,steps.0.tool,nowhere", RUNS)
    assert json.loads(picked) == [
        {"run_id": "run_1", "usage.steps": 2, "steps.0.tool": "a", "nowhere": None},
        {"run_id": "run_2", "usage.steps": 5, "steps.0.tool": None, "nowhere": None},
    ]
    lines = shown("jsonl=status", RUNS).splitlines()
    assert [json.loads(line) for line in lines] == [{"status": "completed"}, {"status": "failed"}]
    assert json.loads(shown("json=status", RUNS[1])) == {"status": "failed"}


def test_value_prints_the_values_alone() -> None:
    assert shown("value=run_id,usage,steps.0.tool", RUNS) == (
        'run_1\t{"steps":2}\ta\nrun_2\t{"steps":5}\t\n'
    )
    # A value cannot break its line or its columns, nor hide a control sequence.
    odd = {"run_id": "run_3", "prompt": "one\ttwo\nthree \x1b[2J"}
    assert shown("value=run_id,prompt", odd) == "run_3\tone\\ttwo\\nthree ⟨U+001B⟩[2J\n"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("table=run_id", "fields select from json, jsonl, yaml or value output"),
        ("value", "value shows selected fields"),
        ("xml", "choose one of table, json, jsonl, yaml, value"),
    ],
)
def test_an_output_that_cannot_be_is_a_usage_error(text: str, why: str) -> None:
    done = CliRunner().invoke(app, ["runs", "list", "-o", text], env={"COLUMNS": "300"})
    assert done.exit_code == 2
    assert why in " ".join(done.output.split())
