"""The `tether` binary with nothing running: one clear line, a hint and a documented exit
code instead of a traceback; help and an example on every command; `--version`; shell
completion scripts; run references checked before anything is sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup

from tether_client.cli import app, main
from tether_client.console import safe
from tether_client.server.embedded import free_port

TETHER = Path(sys.executable).parent / "tether"


def offline_env(home: Path) -> dict[str, str]:
    """A user with no system: an empty TETHER_HOME and an API address nothing listens on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    dead = f"http://127.0.0.1:{free_port()}"
    return env | {
        "TETHER_HOME": str(home),
        "TETHER_API_URL": dead,
        "TETHER_APPROVALS_URL": dead,
        "TETHER_OUTPUTS_URL": dead,
        "TETHER_GATEWAY_URL": dead,
        "TETHER_RUNNER_URL": dead,
        "COLUMNS": "100",
    }


def tether(home: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    assert TETHER.exists(), f"{TETHER} is missing: the tether-client entry point is not installed"
    return subprocess.run(
        [str(TETHER), *argv],
        env=offline_env(home) | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The same user, for in-process calls of `main` (the binary's entry point)."""
    for name in [k for k in os.environ if k.startswith("TETHER_")]:
        monkeypatch.delenv(name)
    for name, value in offline_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    return tmp_path


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    found = capsys.readouterr()
    return code, found.out, found.err


def test_the_binary_with_the_system_down(tmp_path: Path) -> None:
    done = tether(tmp_path, "runs", "list")
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    first, hint = done.stderr.strip().splitlines()
    assert first.startswith("error: cannot reach Tether at http://127.0.0.1:")
    assert "tether up" in hint
    status = tether(tmp_path, "status", "-o", "json")
    assert status.returncode == 3
    assert "tether up" in status.stderr
    assert {s["health"] for s in json.loads(status.stdout)["services"]} == {"down"}


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize(
    "argv",
    [
        ("run", "what time is it?"),
        ("runs", "show", "last"),
        ("runs", "follow", "3fa2"),
        ("skills", "list"),
        ("tools", "list", "-o", "json"),
        ("agents", "list"),
        ("policy", "explain", "calculate", "{}"),
    ],
)
def test_every_command_with_the_system_down(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    code, out, err = run_main(capsys, *argv)
    assert code == 3, err
    assert "Traceback" not in err + out
    assert err.startswith("error: cannot reach Tether at")
    assert "hint: is it running? start it with `tether up`" in err


@pytest.mark.usefixtures("offline")
def test_no_token_is_exit_4_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(capsys, "approvals", "list")
    assert code == 4
    assert "no_token" in err
    assert "hint: run `tether up`" in err


@pytest.mark.usefixtures("offline")
def test_bad_usage_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(capsys, "runs", "list", "--status", "sleeping")[0] == 2
    assert run_main(capsys, "run", "x", "--mode", "anything-goes")[0] == 2
    assert run_main(capsys, "no-such-command")[0] == 2
    code, _, err = run_main(capsys, "runs", "show", "run_$(id)")
    assert code == 2  # refused before anything is sent
    assert "not a run id" in err
    code, _, err = run_main(capsys, "run", "x", "--max-cost", "-1")
    assert code == 2
    assert "--max-cost" in err
    code, _, err = run_main(capsys, "tools", "run", "calculate", "[1]")
    assert (code, "must be a JSON object" in err) == (2, True)


def test_version_and_the_exit_codes_in_help(tmp_path: Path) -> None:
    version = tether(tmp_path, "--version")
    assert (version.returncode, version.stdout.split()[0]) == (0, "tether")


@pytest.mark.usefixtures("offline")
def test_help_ends_with_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "--help")
    assert code == 0
    for line in ("3     not reachable", "4     auth", "5     not found", "130   interrupted"):
        assert line in out


def commands(group: TyperGroup, path: str = "tether") -> list[tuple[str, Any]]:
    """Every command under `group`, the lazily loaded ones loaded."""
    found: list[tuple[str, Any]] = []
    with typer.Context(group) as ctx:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            here = f"{path} {name}"
            if isinstance(command, TyperGroup):
                found += commands(command, here)
            else:
                found.append((here, command))
    return found


def test_every_command_and_argument_has_help_and_an_example() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    listed = commands(root)
    assert len(listed) > 30
    for path, command in listed:
        assert "Example: tether" in (command.help or ""), f"{path} has no example"
        for param in command.params:
            if param.name in ("help", "install_completion", "show_completion"):
                continue
            assert getattr(param, "help", None), f"{path}: {param.name} has no help"


def test_completion_script_and_answers(tmp_path: Path) -> None:
    # The shell is found among the command's parents (typer asks shellingham), as when a
    # person types it: so it is typed in bash here, not left to whatever ran pytest.
    done = subprocess.run(
        ["bash", "-c", f"{TETHER} --show-completion; exit $?"],
        env=offline_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "_TETHER_COMPLETE=complete_bash" in done.stdout
    # The script's request is answered with the commands that match.
    asked = tether(
        tmp_path, _TETHER_COMPLETE="complete_bash", COMP_WORDS="tether ru", COMP_CWORD="1"
    )
    assert set(asked.stdout.split()) >= {"run", "runs"}


def test_control_characters_are_shown_not_obeyed() -> None:
    assert safe("ok\x1b]0;owned\x07 \x9b2J\ttab\nline") == (
        "ok⟨U+001B⟩]0;owned⟨U+0007⟩ ⟨U+009B⟩2J\ttab\nline"
    )
