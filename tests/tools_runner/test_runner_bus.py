"""Through the bus against the real services: the catalogue carries every built-in and
the sandbox level, and a deny-listed command or an escaping path sent straight onto
the bus (skipping the brain's gates) is refused by the runner itself.

Also issue 28's breaks, through the brain's gates and the runner's sandbox: writes
through a reopened descriptor, locale variables pointing at the workspace and
protected names behind globs all ask; git reads no program from a repository config
the model wrote; the runner's environment does not reach a command."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tether_client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.messages.tools import CatalogRequest, ExecuteTool, ToolResult
from tether_common.testing import call, event_data, say, write_script
from tether_tools_runner.sandbox import hand_over, sandbox_user

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def runner_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runner-ws")


AGENT = "sheller"  # runs shell commands without asking, unless the classifier asks
# Host variables that must never reach a sandboxed command (issue 28, item 7).
HOST_SECRETS = {
    "GITHUB_PAT": "ghp_issue28secretvalue0000000000000000",
    "DOCKER_AUTH_CONFIG": '{"auths":{"r.example":{"auth":"aXNzdWUyODpzZWNyZXQ="}}}',
    "SENTRY_DSN": "https://issue28key@o1.ingest.sentry.io/1",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0/B0/issue28secret",
    "REDIS_URL": "redis://:issue28pw@redis.example:6379/0",
    "AZURE_STORAGE_CONNECTION_STRING": (
        "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=issue28azurekey=="
    ),
}


@pytest.fixture(scope="module")
def stack_extra_env(runner_workspace: Path) -> dict[str, str]:
    return {
        "TETHER_RUNNER_WORKSPACE": str(runner_workspace),
        "TETHER_BRAIN_WORKSPACE": str(runner_workspace),
        "TETHER_RUNNER_MIN_SANDBOX": json.dumps({"shell": "rlimits"}),
        "TETHER_BRAIN_AGENTS": json.dumps({AGENT: {"grants": ["shell#noapproval"]}}),
        **HOST_SECRETS,
    }


async def execute(bus: Bus, name: str, args: dict[str, Any]) -> ToolResult:
    call = ExecuteTool(run_id="run-bus", call_id=uuid.uuid4().hex[:8], name=name, args=args)
    return await bus.request(bus.subjects.tool_execute, call, timeout=30)


async def test_catalogue_lists_builtins_and_sandbox_level(stack_bus: Bus) -> None:
    catalog = await stack_bus.request(stack_bus.subjects.tool_catalog, CatalogRequest())
    names = {tool.name for tool in catalog.tools}
    assert names >= {"current_time", "calculate", "file_read", "file_edit", "shell", "web_fetch"}
    assert catalog.sandbox_level in {"none", "rlimits", "bwrap", "seccomp"}
    for tool in catalog.tools:
        assert tool.parameters["additionalProperties"] is False


async def test_deny_listed_command_on_the_bus_is_refused(
    stack_bus: Bus, runner_workspace: Path
) -> None:
    (runner_workspace / "keep.txt").write_text("still here")
    for command in ("rm -rf / --no-preserve-root", "rm -rf ~", "mkfs.ext4 /dev/sda"):
        result = await execute(stack_bus, "shell", {"command": command})
        assert result.error_code == "deny_listed", result.content
    assert (runner_workspace / "keep.txt").read_text() == "still here"
    served = await execute(stack_bus, "shell", {"command": "cat keep.txt"})
    assert served.content == "exit code 0\nstill here"


async def test_escaping_paths_and_urls_on_the_bus_are_refused(stack_bus: Bus) -> None:
    read = await execute(stack_bus, "file_read", {"path": "../../etc/passwd"})
    assert read.error_code == "path_denied"
    fetch = await execute(stack_bus, "web_fetch", {"url": "http://169.254.169.254/"})
    assert fetch.error_code == "blocked_destination"


async def test_sandbox_attestation_is_served_over_http(stack: Supervisor, stack_bus: Bus) -> None:
    async with httpx.AsyncClient(base_url=stack.child("tools-runner").url) as client:
        assert (await client.get("/sandbox")).status_code == 401  # a token is required
        admin = {"Authorization": f"Bearer {stack.env['TETHER_OPERATOR_TOKEN']}"}
        report = (await client.get("/sandbox", headers=admin)).json()
    catalog = await stack_bus.request(stack_bus.subjects.tool_catalog, CatalogRequest())
    assert report["level"] == catalog.sandbox_level
    assert {"seccomp", "landlock_abi", "process_limit"} <= set(report["features"])


# ------------------------------------------------------------------------ issue 28


async def shell_through_the_brain(
    stack: Supervisor, scripts: Path, commands: list[str]
) -> list[dict[str, Any]]:
    """Each command as the model's first shell call of a run of its own (a later one
    would ask because the run read command output), through every gate. The runs are
    interactive with no operator connected, so an ask ends as `approval_unavailable`."""

    async def one(client: TetherClient, command: str) -> dict[str, Any]:
        sent = call("shell", command=command)
        model = write_script(scripts, [[sent], say("done")])
        accepted = await client.start_run(
            "run it", provider="scripted", model=model, agent=AGENT, interactive=True
        )
        events = [e async for e in client.events(accepted.run_id)]
        found = [r for r in event_data(events, "tool.result") if r["call_id"] == sent["id"]]
        assert len(found) == 1, (command, events)
        return found[0]

    async with TetherClient(stack.child("brain").url) as client:
        return list(await asyncio.gather(*(one(client, command) for command in commands)))


def asked(result: dict[str, Any]) -> bool:
    return bool(result["error_code"] == "approval_unavailable")


def writable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o666)
    return path


DESCRIPTOR_WRITES = [
    "echo X 3<app.py >/dev/fd/3",
    "echo X 3<app.py >>/dev/fd/3",
    "echo X 2<app.py >/dev/stderr",
    "echo X 1<app.py >>/dev/stdout",
    "echo X <app.py >/dev/fd/0",
    "echo X {fd}<app.py >/dev/fd/10",
    "cat notes.txt 4<app.py >/proc/self/fd/4",
    "{ echo X >/dev/stdout; } 1<app.py",
]


async def test_writes_through_a_reopened_descriptor_ask(
    stack: Supervisor, scripts_dir: Path, runner_workspace: Path
) -> None:
    """Item 1: bash reopens `/dev/fd/N` for writing, so each of these overwrote app.py
    while classified read-only."""
    app = writable(runner_workspace / "app.py", "print('original')\n")
    writable(runner_workspace / "notes.txt", "notes\n")
    results = await shell_through_the_brain(stack, scripts_dir, DESCRIPTOR_WRITES)
    for command, result in zip(DESCRIPTOR_WRITES, results, strict=True):
        assert asked(result), (command, result)
    assert app.read_text() == "print('original')\n"
    # Stdout and stderr themselves stay writable without asking.
    fine = await shell_through_the_brain(stack, scripts_dir, ["cat app.py >/dev/stdout 2>&1"])
    assert not asked(fine[0]), fine


async def test_locale_values_and_globbed_protected_names_ask(
    stack: Supervisor, scripts_dir: Path, runner_workspace: Path
) -> None:
    """Items 2 and 3: a locale variable holding a path loads a message catalog from the
    workspace; `.gi?/config` reads the repository config (a remote URL's secret)."""
    commands = [
        f"LANGUAGE=../../..{runner_workspace}/n LC_ALL=C.UTF-8 ls nonexist",
        "TZ=../../../tmp/zone date",
        "LC_MESSAGES=%n%n ls nonexist",
        "cat .gi?/config",
        "cat .git/conf*",
        "head {.git,x}/config",
        "grep url .[g]it/config",
        "LC_ALL=C.UTF-8 ls nonexist",  # a plain value still runs
    ]
    results = await shell_through_the_brain(stack, scripts_dir, commands)
    assert [asked(result) for result in results] == [True] * 7 + [False], results


def _hostile_repository(root: Path) -> Path:
    """A repository whose config (as one allowed command could have written it) names an
    attributes file and a textconv driver, through every route git has to a program."""
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "PATH": "/usr/bin:/bin"}
    env |= {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b.c"}
    env |= {"GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b.c"}
    (root / "notes.txt").write_text("one\n")
    git = ["git", "-c", "safe.directory=*"]  # the workspace is the sandbox user's
    for args in (["init", "-q"], ["add", "notes.txt"], ["commit", "-qm", "1"]):
        subprocess.run([*git, *args], cwd=root, env=env, check=True)
    (root / "notes.txt").write_text("two\n")
    subprocess.run([*git, "commit", "-qam", "2"], cwd=root, env=env, check=True)
    canary = root / "canary.sh"
    canary.write_text(f'#!/bin/sh\necho "ran $*" >> {root}/canary.log\ncat "$@"\n')
    canary.chmod(0o755)
    (root / "n.attr").write_text("* diff=x filter=x\n")
    (root / "more.cfg").write_text(f'[diff "y"]\n\ttextconv = {canary}\n')
    with (root / ".git" / "config").open("a") as config:
        config.write(
            f"[core]\n\tattributesFile = {root}/n.attr\n"
            f'[diff "x"]\n\ttextconv = {canary}\n'
            f'[filter "x"]\n\tclean = {canary}\n\tsmudge = {canary}\n'
            f"[include]\n\tpath = {root}/more.cfg\n"
            f'[includeIf "gitdir:{root}/"]\n\tpath = {root}/more.cfg\n'
            '[remote "origin"]\n\turl = https://bob:issue28remotepw@git.example/r.git\n'
        )
    hand_over(root, sandbox_user())
    return canary


async def test_git_runs_no_program_a_repository_config_names(
    stack: Supervisor, stack_bus: Bus, scripts_dir: Path, runner_workspace: Path
) -> None:
    """Item 1, the chain: with `core.attributesFile` and a textconv driver appended to
    `.git/config`, an allowed `git log -p` ran the driver as the sandbox user."""
    _hostile_repository(runner_workspace)
    readers = ["git log -p", "git diff HEAD~1", "git show HEAD", "git status"]
    results = await shell_through_the_brain(stack, scripts_dir, readers)
    assert not any(asked(result) for result in results), results
    assert "+two" in results[0]["content"], results[0]  # git read the repository
    straight = await execute(stack_bus, "shell", {"command": "git log -p -1"})
    assert "+two" in straight.content, straight.content
    assert not (runner_workspace / "canary.log").exists(), (
        runner_workspace / "canary.log"
    ).read_text()


async def test_the_runner_environment_does_not_reach_a_command(
    stack: Supervisor, stack_bus: Bus
) -> None:
    """Item 7: the sandbox's environment was the runner's minus a deny-list."""
    runner = stack.child("tools-runner").proc
    assert runner is not None
    own = Path(f"/proc/{runner.pid}/environ").read_bytes().decode()
    assert all(f"{name}=" in own for name in HOST_SECRETS), "the runner must have them"
    result = await execute(
        stack_bus, "shell", {"command": "env; tr '\\0' '\\n' </proc/self/environ"}
    )
    assert result.error_code is None, result.content
    assert "PATH=" in result.content, result.content
    assert "LANG=C.UTF-8" in result.content, result.content
    for name, value in HOST_SECRETS.items():
        assert name not in result.content, result.content
        assert value not in result.content, result.content
