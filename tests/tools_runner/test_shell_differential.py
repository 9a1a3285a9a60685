"""The shell classifier against the real sandbox: every command of a generated corpus
that the classifier allows is run in bubblewrap with a canary, and none may write a file
or start a program it should not (bench/shellfuzz.py holds the corpus and the harness;
`make fuzz` runs the large corpus). Also: a repository the model made from scratch in
the workspace gives git no program to run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tether_common.safety import classify
from tether_tools_runner.sandbox import Attestation, SandboxLimits, hand_over, run_sandboxed

ROOT = Path(__file__).resolve().parents[2]
# 8,000 of the grammar's ~8,400 commands are classified; a seeded sample of the ~1,000 it
# allows is run (each costs a sandbox); `make fuzz` runs every allowed one of 10,000.
CI_CORPUS, CI_RUN = 8000, 100
CANARY = '#!/bin/sh\necho "started $0" >> "$(dirname "$0")/record"\n'


def _require_tools(attestation: Attestation) -> None:
    if not attestation.at_least("bwrap"):
        pytest.fail(
            f"bubblewrap does not work here (apt-get install bubblewrap): {attestation.problems}"
        )
    if shutil.which("strace") is None:
        pytest.fail("strace is not installed (apt-get install strace): the exec trace needs it")


def test_no_allowed_command_of_the_corpus_has_an_effect(attestation: Attestation) -> None:
    _require_tools(attestation)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.shellfuzz",
            "--size",
            str(CI_CORPUS),
            "--max-run",
            str(CI_RUN),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert "0 allowed commands had effects (with an exec trace)" in summary, summary
    effects = [line for line in done.stdout.splitlines() if line.startswith("EFFECT")]
    assert not effects, "\n".join(effects)
    assert done.returncode == 0, done.stdout[-5_000:] + done.stderr[-5_000:]


REFUSED = {
    "sed -ee notes.txt": "canary started",  # sed's e runs ./canary, a line of notes.txt
    "echo x | sort --output=written.txt": "created written.txt",
    "find . -name notes.txt -exec ./canary {} +": "canary started",
    # The sandbox's PATH is fixed to system folders: a bare name finds no canary, and
    # only the exec trace shows that find tried to start one.
    "find . -name notes.txt -exec canary {} +": "tried to start /usr/bin/canary",
    "awk 'BEGIN{system(\"id\")}'": "started /bin/sh, which the command does not name",
}


def test_the_harness_sees_effects_of_refused_commands(attestation: Attestation) -> None:
    """The check must be able to fail: commands the classifier rightly refuses, run
    anyway, are caught by the canary, the watched tree and the exec trace."""
    _require_tools(attestation)
    for command in REFUSED:
        assert not classify(command).allowed, command
    forced = [arg for command in REFUSED for arg in ("--force", command)]
    done = subprocess.run(
        [sys.executable, "-m", "bench.shellfuzz", *forced],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("EFFECT")]
    for command, effect in REFUSED.items():
        hit = [line for line in lines if line.startswith(f"EFFECT  {command!r}")]
        assert hit, (command, lines)
        assert effect in hit[0], (command, hit[0])


def _bare_repository(root: Path) -> None:
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "PATH": "/usr/bin:/bin"}
    env |= {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b.c"}
    env |= {"GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b.c"}
    work = root.parent / "source"
    work.mkdir()
    (work / "f.txt").write_text("one\n")
    for args in (["init", "-q", "-b", "main"], ["add", "f.txt"], ["commit", "-qm", "1"]):
        subprocess.run(["git", *args], cwd=work, env=env, check=True)
    (work / "f.txt").write_text("two\n")
    subprocess.run(["git", "commit", "-qam", "2"], cwd=work, env=env, check=True)
    # The workspace root itself becomes the repository: HEAD, config, objects, refs.
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(work), str(root / "r")], env=env, check=True
    )
    for entry in (root / "r").iterdir():
        entry.rename(root / entry.name)
    (root / "r").rmdir()
    with (root / "config").open("a") as config:
        config.write('[diff "c"]\n\ttextconv = ./canary\n')
    (root / "info").mkdir(exist_ok=True)
    (root / "info" / "attributes").write_text("* diff=c\n")
    (root / "canary").write_text(CANARY)
    (root / "canary").chmod(0o755)


async def test_a_repository_made_by_the_model_runs_no_program(
    attestation: Attestation, workspace: Path
) -> None:
    """Files the model may write (HEAD, config, objects/, refs/ at the workspace root)
    make a bare repository whose config names a textconv driver; `git log -p` is
    classified read-only, so the sandbox must not let git read that config."""
    _require_tools(attestation)
    _bare_repository(workspace)
    hand_over(workspace, attestation.user)
    assert classify("git log -p").allowed
    outcome = await run_sandboxed(
        "git log -p", workspace, attestation=attestation, timeout_s=30, limits=SandboxLimits()
    )
    # git sees the repository and refuses it (safe.bareRepository=explicit, pinned by
    # the sandbox); without the pin it prints the commit and runs the driver.
    assert "cannot use bare repository" in outcome.output, outcome.output
    assert not (workspace / "record").exists(), (workspace / "record").read_text()
