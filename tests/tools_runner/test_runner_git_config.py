"""Git and the shell in the sandbox read no configuration the command could have written:
HOME is a private folder in the call's tmpfs, global and system git config are off, and
the git keys that run programs are pinned at the highest precedence, above a
`.git/config` in the workspace. A canary program records every run.

Programs chosen through `.gitattributes` drivers (`diff.<driver>.textconv`, filters) and
`include.path` cannot be pinned that way: a command the classifier allows reads a
sanitised copy of the repository's config instead (`sandbox/gitconfig.py`), and an
approved one runs such a driver only as the sandbox user, inside the sandbox."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tether_common.messages.tools import ToolResult
from tether_tools_runner.executor import Executor
from tether_tools_runner.sandbox import Attestation, SandboxLimits, run_sandboxed, sandbox_user

Call = Callable[..., Awaitable[ToolResult]]
READING = [
    "git log",
    "git log -p",
    "git log --stat",
    "git -p log",
    "git show",
    "git diff",
    "git diff HEAD",
    "git diff --stat",
    "git status",
    "git status --short",
    "git blame a.txt",
    "git grep -n b",
    "git branch",
]


@pytest.fixture
def repo(attestation: Attestation, executor: Executor, call: Call, workspace: Path) -> Path:
    if not attestation.at_least("bwrap"):
        pytest.fail(
            f"bubblewrap does not work here (apt-get install bubblewrap): {attestation.problems}"
        )
    canary = workspace / "canary.sh"
    canary.write_text(f'#!/bin/sh\necho "ran as $(id -u): $0 $*" >> {workspace}/canary.log\ncat\n')
    canary.chmod(0o755)
    return workspace


async def make_repo(executor: Executor, call: Call) -> None:
    setup = (
        "git init -q . && echo a > a.txt && git add a.txt && "
        "git -c user.name=t -c user.email=t@t commit -qm one && echo b >> a.txt && echo ready"
    )
    result = await call(executor, "shell", {"command": setup})
    assert result.content.endswith("ready\n"), result.content


def tricks(canary: Path, workspace: Path) -> str:
    hooks = workspace / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("pre-commit", "post-commit", "post-checkout", "post-index-change"):
        (hooks / hook).write_text(f"#!/bin/sh\n{canary} hook-{hook}\n")
        (hooks / hook).chmod(0o755)
    return (
        f"[core]\n\tpager = {canary}\n\tfsmonitor = {canary}\n\thooksPath = {hooks}\n"
        f"\tsshCommand = {canary}\n\teditor = {canary}\n\taskPass = {canary}\n"
        f"[diff]\n\texternal = {canary}\n"
        f"[pager]\n\tlog = {canary}\n\tdiff = {canary}\n\tstatus = {canary}\n\tshow = {canary}\n"
        f"[alias]\n\tlog = !{canary}\n\tstatus = !{canary}\n\tdiff = !{canary}\n"
        f"[credential]\n\thelper = !{canary}\n[gpg]\n\tprogram = {canary}\n"
        f"[log]\n\tshowSignature = true\n[include]\n\tpath = {workspace}/.gitconfig\n"
    )


async def run_all(executor: Executor, call: Call, commands: list[str]) -> list[str]:
    outputs = []
    for command in commands:
        outputs.append((await call(executor, "shell", {"command": command})).content)
    return outputs


async def test_repository_config_runs_no_program(
    repo: Path, executor: Executor, call: Call
) -> None:
    await make_repo(executor, call)
    canary = repo / "canary.sh"
    with (repo / ".git" / "config").open("a") as config:
        config.write(tricks(canary, repo))
    (repo / ".gitconfig").write_text(
        f"[core]\n\tfsmonitor = {canary}\n[diff]\n\texternal = {canary}\n"
    )
    commit = "git -c user.name=t -c user.email=t@t commit -qam two; git checkout -q -b other"
    outputs = await run_all(executor, call, [*READING, commit, *READING])
    assert any("a.txt" in output for output in outputs)  # git really ran
    assert not (repo / "canary.log").exists(), (repo / "canary.log").read_text()


async def test_home_and_xdg_config_in_the_workspace_are_not_read(
    repo: Path, executor: Executor, call: Call
) -> None:
    await make_repo(executor, call)
    canary = repo / "canary.sh"
    config = f"[core]\n\tpager = {canary}\n\tfsmonitor = {canary}\n[diff]\n\texternal = {canary}\n"
    (repo / ".gitconfig").write_text(config)
    (repo / ".config" / "git").mkdir(parents=True)
    (repo / ".config" / "git" / "config").write_text(config)
    for rc in (".bashrc", ".bash_profile", ".profile", ".bash_logout"):
        (repo / rc).write_text(f"{canary} {rc}\n")
    (repo / ".config" / "git" / "attributes").write_text("* diff=evil\n")
    outputs = await run_all(
        executor, call, [*READING, "echo $HOME $XDG_CONFIG_HOME", "bash -c true"]
    )
    assert "/tmp/home /tmp/home/.config" in outputs[-2]
    assert not (repo / "canary.log").exists(), (repo / "canary.log").read_text()


async def test_code_running_variables_do_not_reach_the_sandbox(
    repo: Path, executor: Executor, call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = repo / "canary.sh"
    for name in ("BASH_ENV", "ENV", "PROMPT_COMMAND", "LESSOPEN", "LESSCLOSE", "GIT_PAGER"):
        monkeypatch.setenv(name, f"{canary} {name}")
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", str(canary))
    monkeypatch.setenv("LD_PRELOAD", str(repo / "evil.so"))
    monkeypatch.setenv("LD_LIBRARY_PATH", str(repo))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(repo / ".gitconfig"))
    secrets = {  # no name a deny-list would catch: only an allow-list keeps them out
        "GITHUB_PAT": "ghp_x1",
        "DOCKER_AUTH_CONFIG": '{"auths":{}}',
        "SENTRY_DSN": "https://k@sentry.example/1",
        "SLACK_WEBHOOK_URL": "https://hooks.slack.example/T/B/x",
        "REDIS_URL": "redis://:pw@h",
        "AZURE_STORAGE_CONNECTION_STRING": "AccountName=a;AccountKey=k==",
        "LANGUAGE": "../../x",
        "LOCPATH": str(repo),
        "TZ": f"{repo}/zone",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    result = await call(
        executor, "shell", {"command": "env; bash -c true; sh -c true; less /dev/null"}
    )
    for name in secrets:
        assert f"{name}=" not in result.content, result.content
    for name in ("BASH_ENV=", "\nENV=", "PROMPT_COMMAND", "LESSOPEN", "LD_PRELOAD", "LD_LIBRARY"):
        assert name not in result.content, result.content
    assert "GIT_CONFIG_GLOBAL=/dev/null" in result.content
    assert "GIT_PAGER=cat" in result.content
    assert not (repo / "canary.log").exists()


def drivers(canary: Path, workspace: Path) -> str:
    """Every route from a repository config to a program git cannot be pinned against."""
    (workspace / "n.attr").write_text("* diff=x filter=x merge=x\n")
    (workspace / "more.cfg").write_text(f'[diff "y"]\n\ttextconv = {canary}\n')
    return (
        f"[core]\n\tattributesFile = {workspace}/n.attr\n"
        f'[diff "x"]\n\ttextconv = {canary}\n\tcommand = {canary}\n'
        f'[filter "x"]\n\tclean = {canary}\n\tsmudge = {canary}\n\tprocess = {canary}\n'
        f'[merge "x"]\n\tdriver = {canary}\n'
        f"[include]\n\tpath = {workspace}/more.cfg\n"
        f'[includeIf "gitdir:{workspace}/"]\n\tpath = {workspace}/more.cfg\n'
        f'[includeIf "onbranch:*"]\n\tpath = {workspace}/more.cfg\n'
        f'[remote "origin"]\n\turl = https://bob:pw@git.example/r.git\n'
        f"\tuploadpack = {canary}\n"
    )


async def test_allowed_commands_read_no_driver_from_the_repository(
    repo: Path, executor: Executor, call: Call
) -> None:
    """Issue 28: one allowed call appended `core.attributesFile` and a textconv driver to
    `.git/config`; a second, `git log -p`, ran the driver."""
    await make_repo(executor, call)
    canary = repo / "canary.sh"
    (repo / ".gitattributes").write_text("* diff=y filter=x\n")
    with (repo / ".git" / "config").open("a") as config:
        config.write(drivers(canary, repo))
    outputs = await run_all(executor, call, READING)
    assert "+a" in outputs[READING.index("git log -p")], outputs
    assert "+b" in outputs[READING.index("git diff")], outputs
    assert not (repo / "canary.log").exists(), (repo / "canary.log").read_text()


@pytest.mark.parametrize(
    "layout",
    ["gitdir-file", "symlinked-config", "linked-worktree", "symlinked-git"],
)
async def test_layouts_the_view_cannot_cover_give_git_no_repository(
    repo: Path, executor: Executor, call: Call, layout: str
) -> None:
    await make_repo(executor, call)
    canary = repo / "canary.sh"
    hidden = repo / "hidden"
    (repo / ".git").rename(hidden)
    with (hidden / "config").open("a") as config:
        config.write(drivers(canary, repo))
    (repo / ".gitattributes").write_text("* diff=x\n")
    if layout == "gitdir-file":
        (repo / ".git").write_text(f"gitdir: {hidden}\n")
    elif layout == "symlinked-git":
        (repo / ".git").symlink_to(hidden)
    else:
        (hidden).rename(repo / ".git")
        if layout == "symlinked-config":
            (repo / ".git" / "config").rename(repo / "real-config")
            (repo / ".git" / "config").symlink_to(repo / "real-config")
        else:
            (repo / ".git" / "commondir").write_text(f"{repo}/elsewhere\n")
    outputs = await run_all(executor, call, ["git log -p", "git diff", "git status"])
    assert "not a git repository" in outputs[0], outputs
    assert not (repo / "canary.log").exists(), (repo / "canary.log").read_text()


async def test_approved_commands_run_drivers_only_inside_the_sandbox(
    repo: Path, executor: Executor, call: Call, attestation: Attestation
) -> None:
    """An approved command sees the repository's config as it is (a driver it names
    runs), but only as the sandbox user, inside the sandbox."""
    await make_repo(executor, call)
    canary = repo / "canary.sh"
    (repo / ".gitattributes").write_text("*.txt diff=evil\n")
    with (repo / ".git" / "config").open("a") as config:
        config.write(f'[diff "evil"]\n\ttextconv = {canary}\n')
    for command in ("git diff", "git log -p"):
        await run_sandboxed(
            command, repo, attestation=attestation, timeout_s=30, limits=SandboxLimits(),
            sanitise_git=False,
        )  # fmt: skip
    ran = (repo / "canary.log").read_text().splitlines()
    assert ran
    assert {line.split(":")[0] for line in ran} == {f"ran as {sandbox_user().uid}"}
