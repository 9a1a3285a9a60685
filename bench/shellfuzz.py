"""`python -m bench shellfuzz`: the differential test of the shell classifier against the
real sandbox. A generated corpus (`shellfuzz_corpus`: read-only commands x options x payloads x spellings,
deterministic for a seed) is classified; every command classified `allow` is run in the
bubblewrap sandbox, in a fresh copy of a watched workspace, and must change nothing:

- the watched tree: every file's path, kind, mode, size and sha256, before and after;
- canary programs (`./canary`, `bin/canary`, `bare.git/canary`) that record their
  own start in `.canary/record`; the payloads try to start them;
- an exec trace (`strace -f -e trace=execve` around the worker, from outside the
  sandbox): no program may start that the command line does not name, and no program
  named canary may even be tried. The sandbox's PATH is fixed to system folders, so a
  bare `canary` payload finds nothing to run; the trace still shows the execve attempts
  (`find -exec canary`, `env canary`, ...), which is what the classifier let through.

    python -m bench.shellfuzz [--size N] [--seed S]   # exit 1 when an allowed command had effects

The suite's test runs a small corpus (tests/tools_runner/test_shell_differential.py);
`make fuzz` runs 10,000.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench.shellfuzz_corpus import MUST_ALLOW, corpus
from tether_common.safety import classify
from tether_tools_runner.sandbox import SandboxLimits, attest, hand_over, run_sandboxed

CANARY = (
    "#!/bin/sh\n"
    'd=$(dirname "$0")\n'
    'for r in "$d/.canary" "$d/../.canary"; do\n'
    '  if [ -d "$r" ]; then echo "started: $0 $*" >> "$r/record"; break; fi\n'
    "done\n"
    "echo CANARY-STARTED\n"
)
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "fuzz",
    "GIT_AUTHOR_EMAIL": "fuzz@example.invalid",
    "GIT_COMMITTER_NAME": "fuzz",
    "GIT_COMMITTER_EMAIL": "fuzz@example.invalid",
    "PATH": "/usr/bin:/bin",
}

# --------------------------------------------------------------------- the workspace

Snapshot = dict[str, tuple[str, int, int, str]]


def _run_git(args: list[str], cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=_GIT_ENV, check=True, capture_output=True)


def build_template(root: Path) -> Path:
    """The watched workspace every command starts from."""
    ws = root / "template"
    (ws / "src").mkdir(parents=True)
    (ws / "bin").mkdir()
    (ws / ".canary").mkdir()
    (ws / "notes.txt").write_text("hello\n./canary\nx\n")
    (ws / "src" / "a.py").write_text("print('hello')\n")
    (ws / "src" / "b.txt").write_text("hello\nthere\n")
    (ws / "script.sed").write_text("e ./canary\n")
    (ws / "prog.awk").write_text('BEGIN { system("./canary") }\n')
    (ws / ".env").write_text("SECRET=1\n")
    for name in ("-ee", "-delete", "--pre=canary", "-owritten.txt", "--output=written.txt"):
        (ws / name).write_text("option-looking name\n")
    for path in (ws / "canary", ws / "bin" / "canary"):
        path.write_text(CANARY)
        path.chmod(0o755)
    _run_git(["init", "-q", "-b", "main"], ws)
    shutil.rmtree(ws / ".git" / "hooks", ignore_errors=True)
    _run_git(["add", "notes.txt", "src"], ws)
    _run_git(["commit", "-q", "-m", "one"], ws)
    (ws / "notes.txt").write_text("hello\n./canary\nx\ny\n")
    _run_git(["commit", "-q", "-am", "two"], ws)
    _run_git(["init", "-q", "--bare", "-b", "main", "bare.git"], ws)
    shutil.rmtree(ws / "bare.git" / "hooks", ignore_errors=True)
    _run_git(["push", "-q", "bare.git", "main"], ws)
    hostile = (
        "[core]\n\tpager = ./canary\n\tfsmonitor = ./canary\n\thooksPath = bin\n"
        '[diff]\n\texternal = ./canary\n[diff "canary"]\n\ttextconv = ./canary\n'
        "[alias]\n\tl = !./canary\n[log]\n\tshowSignature = true\n[gpg]\n\tprogram = ./canary\n"
    )
    # As if the model wrote them: a HOME-style .gitconfig and attributes in the
    # worktree, and a repository (bare.git) it made from scratch with its own config.
    (ws / ".gitconfig").write_text(hostile)
    (ws / ".gitattributes").write_text("* diff=canary\n")
    with (ws / "bare.git" / "config").open("a") as config:
        config.write(hostile)
    (ws / "bare.git" / "info").mkdir(exist_ok=True)
    (ws / "bare.git" / "info" / "attributes").write_text("* diff=canary\n")
    shutil.copy(ws / "canary", ws / "bare.git" / "canary")
    (ws / "bin" / "post-index-change").write_text(CANARY)
    (ws / "bin" / "post-index-change").chmod(0o755)
    subprocess.run(["tar", "-cf", str(ws / "a.tar"), "-C", str(ws), "notes.txt"], check=True)
    subprocess.run(["gzip", "-k", str(ws / "notes.txt")], check=True)
    (ws / "notes.txt.gz").rename(ws / "x.gz")
    return ws


def snapshot(root: Path) -> Snapshot:
    """Every entry below `root` (but `.canary/`): kind, mode, size, sha256 or link target."""
    seen: Snapshot = {}
    for folder, dirs, files in os.walk(root):
        if Path(folder) == root:
            dirs[:] = [d for d in dirs if d != ".canary"]
        for name in (*dirs, *files):
            path = Path(folder, name)
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                digest = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                digest = ""
            seen[str(path.relative_to(root))] = (
                stat.filemode(info.st_mode),
                info.st_mode,
                info.st_size if stat.S_ISREG(info.st_mode) else 0,
                digest,
            )
    return seen


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    found = [f"created {p}" for p in after.keys() - before.keys()]
    found += [f"removed {p}" for p in before.keys() - after.keys()]
    found += [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    return sorted(found)


# ------------------------------------------------------------------------ the worker


async def _run_all(commands: list[str], template: Path, base: Path, out: Path) -> None:
    """Run each command in a fresh copy of the template; one JSON line of effects each,
    written as it is known (a worker that dies keeps what it found)."""
    attestation = attest()
    if not attestation.at_least("bwrap"):
        raise SystemExit(
            f"bubblewrap does not work here (apt-get install bubblewrap): {attestation.problems}"
        )
    expected = snapshot(template)
    for index, command in enumerate(commands):
        ws = base / f"w{index}"
        shutil.copytree(template, ws, symlinks=True)
        hand_over(ws, attestation.user)
        # A marker exec: the trace's segment for this command starts here. Blocking on
        # purpose: the worker runs one command at a time so the trace stays in order.
        subprocess.run(["/bin/true", f"shellfuzz-{index}"], check=True)  # noqa: ASYNC221
        outcome = await run_sandboxed(
            command, ws, attestation=attestation, timeout_s=10, limits=SandboxLimits()
        )
        found = changes(expected, snapshot(ws))
        record = ws / ".canary" / "record"
        if record.exists():
            found.append("canary started: " + record.read_text().strip().replace("\n", "; "))
        if outcome.timed_out:
            found.append("timed out")  # not an effect by itself, but a corpus to fix
        with out.open("a") as lines:
            lines.write(json.dumps(found) + "\n")
        shutil.rmtree(ws, ignore_errors=True)


def worker(plan: Path, out: Path) -> None:
    spec = json.loads(plan.read_text())
    asyncio.run(_run_all(spec["commands"], Path(spec["template"]), Path(spec["base"]), out))


# ------------------------------------------------------------------- the exec trace

_EXECVE = re.compile(r'^(\d+)\s+(?:execve\("([^"]*)", \[(.*?)\]|<\.\.\. execve resumed>)')
# The return value, then an errno name and its text when the exec failed.
_RESULT = re.compile(r"\) = (-?\d+)(?: [A-Z0-9]+ \([^()]*\))?$")
TRIED = "tried "  # prefix of a failed exec of a canary in `traced_programs`
# The runner's own git, reading the repository's config to sanitise it (outside the
# sandbox, before it starts): not a program the command started.
SANITISER = '"config", "--file", "-", "--no-includes", "--null", "--list"'


def traced_programs(trace: str) -> dict[int, list[str]]:
    """Programs that started, per command index (after its marker `/bin/true`); a failed
    exec of a canary is kept too, as `tried <path>`: with the sandbox's fixed PATH a bare
    `canary` is never found, and the attempt is the only trace of it."""
    pending: dict[str, str] = {}
    segments: dict[int, list[str]] = {}
    current: int | None = None
    for line in trace.splitlines():
        match = _EXECVE.match(line)
        if match is None:
            continue
        pid, path, argv = match.group(1), match.group(2), match.group(3)
        if path is not None:
            marker = re.search(r'"shellfuzz-(\d+)"', argv or "")
            if marker and path == "/bin/true":
                current = int(marker.group(1))
                segments[current] = []
                continue
            if "unfinished" in line:
                pending[pid] = "" if SANITISER in (argv or "") else path
                continue
        else:
            path = pending.pop(pid, "")
        result = _RESULT.search(line)
        if current is None or not path or result is None or SANITISER in (argv or ""):
            continue
        if result.group(1) == "0":
            segments[current].append(path)
        elif "canary" in os.path.basename(path):
            segments[current].append(TRIED + path)
    return segments


_HELPERS = {"egrep": {"grep"}, "fgrep": {"grep"}}


def unexpected(command: str, programs: list[str], workspace_hint: str) -> list[str]:
    """Programs the command line does not name (beyond bwrap and its bash)."""
    tokens = set(re.findall(r"[A-Za-z0-9_.+\[-]+", command))
    allowed = {"bwrap", "bash"} | tokens
    for token in tokens & _HELPERS.keys():
        allowed |= _HELPERS[token]
    odd = []
    for path in programs:
        name = os.path.basename(path)
        if path.startswith(TRIED):
            odd.append(f"tried to start {path.removeprefix(TRIED)} (a canary's name)")
        elif "canary" in path or workspace_hint in path:
            odd.append(f"started {path}")
        elif name in allowed or (
            "git" in tokens and ("git-core" in path or name.startswith("git"))
        ):
            continue
        else:
            odd.append(f"started {path}, which the command does not name")
    return odd


# ------------------------------------------------------------------------- the driver


@dataclass
class Report:
    tried: int = 0
    allowed: int = 0
    effects: dict[str, list[str]] = field(default_factory=dict)
    traced: bool = False
    ran: int = 0  # allowed commands run in the sandbox (all, unless sampled)
    not_run: int = 0  # allowed commands a failed worker never reached

    def summary(self) -> str:
        trace = "with an exec trace" if self.traced else "WITHOUT an exec trace"
        return (
            f"shellfuzz: {self.tried} commands tried, {self.allowed} allowed, {self.ran} run, "
            f"{len(self.effects)} allowed commands had effects ({trace})"
            + (f"; {self.not_run} allowed commands NOT RUN" if self.not_run else "")
        )


def _split(items: list[str], parts: int) -> list[list[str]]:
    return [items[index::parts] for index in range(parts)]


def run(
    size: int,
    seed: int,
    *,
    workers: int = 2,
    trace: bool = True,
    force: list[str] | None = None,
    max_run: int | None = None,
) -> Report:
    """Classify the corpus, run what is allowed in the sandbox, collect any effects.
    `max_run`: run only a seeded sample of the allowed commands (MUST_ALLOW always).
    `force`: run these commands instead, whatever the classifier says (to show that the
    harness sees effects)."""
    commands = force or corpus(size, seed)
    allowed = force or [command for command in commands if classify(command).allowed]
    report = Report(tried=len(commands), allowed=len(allowed))
    if max_run is not None and len(allowed) > max_run:
        rest = [command for command in allowed if command not in MUST_ALLOW]
        sample = random.Random(seed).sample(rest, max(0, max_run - len(MUST_ALLOW)))
        allowed = [command for command in allowed if command in MUST_ALLOW] + sample
    report.ran = len(allowed)
    strace = shutil.which("strace")
    if trace and strace is None:
        raise SystemExit("strace is not installed (apt-get install strace): no exec trace")
    report.traced = trace
    with tempfile.TemporaryDirectory(prefix="shellfuzz-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        template = build_template(root)
        chunks = [chunk for chunk in _split(allowed, workers) if chunk]
        procs = []
        for number, chunk in enumerate(chunks):
            base = root / f"run{number}"
            base.mkdir()
            plan = root / f"plan{number}.json"
            plan.write_text(
                json.dumps({"commands": chunk, "template": str(template), "base": str(base)})
            )
            argv = [
                sys.executable,
                "-m",
                "bench.shellfuzz",
                "--worker",
                str(plan),
                str(root / f"out{number}.json"),
            ]
            if trace and strace is not None:
                argv = [
                    strace,
                    "-f",
                    "-qq",
                    "-e",
                    "trace=execve",
                    "-e",
                    "signal=none",
                    "-s",
                    "256",
                    "-o",
                    str(root / f"trace{number}"),
                    *argv,
                ]
            procs.append(subprocess.Popen(argv, cwd=Path(__file__).resolve().parent.parent))
        failed = [code for code in (proc.wait() for proc in procs) if code != 0]
        for number, chunk in enumerate(chunks):
            out = root / f"out{number}.json"
            effects = (
                [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
            )
            report.not_run += len(chunk) - len(effects)
            segments = traced_programs((root / f"trace{number}").read_text()) if trace else {}
            for index, command in enumerate(chunk[: len(effects)]):
                found = [f for f in effects[index] if not _benign(command, f)]
                found += unexpected(command, segments.get(index, []), str(root))
                if found:
                    report.effects[command] = found
    if failed:
        raise RuntimeError(f"shellfuzz workers failed ({failed}); {report.summary()}")
    return report


def _benign(command: str, effect: str) -> bool:
    # git status/diff refresh the stat cache in .git/index (no content changes); the
    # sandbox could stop that with GIT_OPTIONAL_LOCKS=0.
    return effect == "changed .git/index" and "git" in command


def print_report(report: Report) -> None:
    for command, found in sorted(report.effects.items()):
        print(f"EFFECT  {command!r}: {'; '.join(found)}")
    print(report.summary(), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.shellfuzz", description=__doc__)
    parser.add_argument("--size", type=int, default=10_000, help="commands to try")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-trace", action="store_true", help="skip the strace exec trace")
    parser.add_argument("--max-run", type=int, help="run a sample of this many allowed commands")
    parser.add_argument("--force", action="append", help="run this command even if not allowed")
    parser.add_argument("--worker", nargs=2, metavar=("PLAN", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker[0]), Path(args.worker[1]))
        return
    report = run(
        args.size,
        args.seed,
        workers=args.workers,
        trace=not args.no_trace,
        force=args.force,
        max_run=args.max_run,
    )
    print_report(report)
    sys.exit(1 if report.effects else 0)


if __name__ == "__main__":
    main()
