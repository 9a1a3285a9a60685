"""`python -m bench shellfuzz`: the differential test of the shell classifier against the
real sandbox. A generated corpus (read-only commands x options x payloads x spellings,
deterministic for a seed) is classified; every command classified `allow` is run in the
bubblewrap sandbox, in a fresh copy of a watched workspace, and must change nothing:

- the watched tree: every file's path, kind, mode, size and sha256, before and after;
- canary programs (`./canary`, `bin/canary` on PATH, `bare.git/canary`) that record their
  own start in `.canary/record`; the payloads try to start them;
- an exec trace (`strace -f -e trace=execve` around the worker, from outside the
  sandbox): no program may start that the command line does not name.

    python -m bench.shellfuzz [--size N] [--seed S]   # exit 1 when an allowed command had effects

The suite's test runs a small corpus (tests/tools_runner/test_shell_differential.py);
`make fuzz` runs 10,000.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tether_common.safety import classify, shell_git, shell_readonly, shell_sed
from tether_common.safety.shell_options import Options
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

# ----------------------------------------------------------------------------- corpus

_CANARIES = ("./canary", "canary", "bin/canary", '"$PWD"/canary')
_FILES = ("notes.txt", "src/a.py", "*", "src/*", "-- notes.txt", ".gitconfig")

# Commands that must stay allowed (and, run, change nothing).
MUST_ALLOW = (
    "sed -n 1,5p notes.txt",
    "sed -n '/x/p' notes.txt",
    "sed -n -e 2p -e '$p' notes.txt",
    "sed 's/hello/bye/g' notes.txt",
    "grep -rn hello .",
    "git log",
    "git log --oneline -5",
    "git log -p",
    "git status",
    "git status --short",
    "git diff",
    "git diff HEAD~1",
    "git show HEAD",
    "git blame notes.txt",
    "git ls-files",
    "git grep hello",
    "find . -name '*.py'",
    "find src -type f -print",
    "awk '{print $1}' notes.txt",
    "sort notes.txt",
    "sort -r -k1 notes.txt",
    "uniq -c notes.txt",
    "diff notes.txt src/b.txt",
    "test -f notes.txt",
    "[ -d src ]",
    "x=1; test -v x",
    'x=1; test "$x" -eq 1',
    "tree -L 2",
    "rg -n hello",
    "file notes.txt",
    "date +%s",
    "cat notes.txt | sort | uniq -c",
)


def _sed(canary: str) -> Iterator[str]:
    scripts = [
        f"e {canary}",
        f"1e {canary}",
        f"$e {canary}",
        f"/x/e {canary}",
        f"1!e {canary}",
        f"p;e {canary}",
        f"s/.*/{canary}/e",
        f"s/x/y/;s/.*/{canary}/ge",
        f"s|.*|{canary}|e",
        f"1{{e {canary}\n}}".replace("\n", ";"),
        "w written.txt",
        "1w written.txt",
        "W written.txt",
        "s/h/j/w written.txt",
        "r .env",
        "R .env",
        "e",
        "2,$e",
    ]
    spellings = [
        "sed '{s}' notes.txt",
        "sed -e '{s}' notes.txt",
        "sed -n -e '{s}' notes.txt",
        "sed -ne '{s}' notes.txt",
        "sed -e'{s}' notes.txt",
        "sed --expression='{s}' notes.txt",
        "sed --expression '{s}' notes.txt",
        "sed --expr='{s}' notes.txt",
        "sed --e='{s}' notes.txt",
        "sed -s -e '{s}' notes.txt",
        "sed notes.txt -e '{s}'",
        "sed -E -n -e '{s}' notes.txt",
        "sed -z -e '{s}' notes.txt",
        "sed -n -e p -e '{s}' notes.txt",
        'sed "{s}" notes.txt',
        "sed --posix -e '{s}' notes.txt",
        "sed --debug -e '{s}' notes.txt",
        "sed -u -e '{s}' notes.txt",
    ]
    for script in scripts:
        for spelling in spellings:
            yield spelling.replace("{s}", script)
    yield from (
        "sed -ee notes.txt",
        "sed -nee notes.txt",
        "sed -n -ee notes.txt",
        f"echo {canary} | sed -ee",
        f"echo {canary} | sed --expr=e",
        f"echo {canary} | sed --expression=e",
        f"echo {canary} | sed e",
        "sed -f script.sed notes.txt",
        "sed --file=script.sed notes.txt",
        "sed --fi=script.sed notes.txt",
        "sed -i s/hello/bye/ notes.txt",
        "sed -i.bak s/hello/bye/ notes.txt",
        "sed --in-place=.b s/hello/bye/ notes.txt",
        "sed --in-pl s/hello/bye/ notes.txt",
        "sed -ni p notes.txt",
        "sed -n p *",
        "sed -n 1p -- *",
        "x=e; sed $x notes.txt",
        'x="e ./canary"; sed "$x" notes.txt',
    )


def _test(canary: str) -> Iterator[str]:
    sub = f"a[$({canary})]"
    yield from (
        f"test -v '{sub}'",
        f'test -v "a[\\$({canary})]"',
        f"[ -v '{sub}' ]",
        f"[[ -v '{sub}' ]]",
        f"test ! -v '{sub}'",
        f"test 1 -eq 1 -a -v '{sub}'",
        f"test \\( -v '{sub}' \\)",
        f"x='{sub}'; test -v \"$x\"",
        f"x='{sub}'; [ -v $x ]",
        f"x=-v; test \"$x\" '{sub}'",
        f"x='{sub}'; [[ $x -eq 1 ]]",
        f"x='{sub}'; [[ x -eq 1 ]]",
        f"x='{sub}'; ((x))",
        f"x='{sub}'; echo $((x))",
        f"x='{sub}'; echo \"$((x+1))\"",
        f"x='{sub}'; echo $[x]",
        f"x='{sub}'; for ((i=x;0;)); do :; done",
        f"printf -v '{sub}' x",
        f"read '{sub}' <<< 1",
        f"x='{sub}'; test \"$x\" -eq 1",
        f"x='{sub}'; printf '%d' \"$x\"",
        f"x='{sub}'; exit \"$x\"",
        f"test '{sub}' -eq 1",
        f"declare -i y; x='{sub}'; y=x",
        f"let '{sub}'",
    )


def _find(canary: str) -> Iterator[str]:
    for action in (
        f"-exec {canary} \\;",
        f"-exec {canary} {{}} +",
        f"-execdir {canary} \\;",
        f"-ok {canary} \\;",
        f"-okdir {canary} \\;",
        "-delete",
        "-fprint written.txt",
        "-fprint0 written.txt",
        "-fprintf written.txt %p",
        "-fls written.txt",
    ):
        for prefix in ("find .", "find . -name notes.txt", "find src -type f -o", "find -L ."):
            yield f"{prefix} {action}"
    yield from ("find *", "find . -name *", 'x=-delete; find . "$x"', "x=-delete; find . $x")


def _awk(canary: str) -> Iterator[str]:
    for program in (
        f'BEGIN{{system("{canary}")}}',
        f'BEGIN{{print | "{canary}"}}',
        f'BEGIN{{"{canary}" | getline x}}',
        'BEGIN{print 1 > "written.txt"}',
        'BEGIN{printf "x" >> "written.txt"}',
        '{print | "sh"}',
        f'BEGIN{{f="system"; @f("{canary}")}}',
        '/"/ {system("./canary")}',
    ):
        for name in ("awk", "gawk", "mawk"):
            yield f"{name} '{program}' notes.txt"
    yield from (
        "awk -f prog.awk notes.txt",
        "gawk --file=prog.awk notes.txt",
        f"gawk -e 'BEGIN{{system(\"{canary}\")}}'",
        "gawk -i prog.awk 'BEGIN{}'",
        "gawk -o 'BEGIN{}'",
        "gawk -p 'BEGIN{}'",
        "gawk -d 'BEGIN{}'",
        "awk -W exec prog.awk",
        "gawk --pretty-print=written.txt 'BEGIN{}'",
    )


def _gits(canary: str) -> Iterator[str]:
    yield from (
        f"git -c core.pager={canary} -p log",
        f"git -c diff.external={canary} diff HEAD~1",
        f"git -c core.fsmonitor={canary} status",
        f"git -c alias.l='!{canary}' l",
        "git --config-env=core.pager=PWD -p log",
        "git --exec-path=. log",
        "git --exec-path=bin log",
        "git log --output=written.txt",
        "git log --outp=written.txt",
        "git log -p --output written.txt",
        "git diff --output=written.txt HEAD~1",
        "git diff --ext-diff HEAD~1",
        "git log -p --ext-diff",
        f"git grep -O{canary} hello",
        f"git grep --open-files-in-pager={canary} hello",
        f"git grep --open-files-in-pager {canary} hello",
        "git log --show-signature",
        "git -p log",
        "git --paginate log",
        f"git ls-remote --upload-pack={canary} .",
        f"git fetch --upload-pack={canary} .",
        "git l",
        "git log -p --textconv",
        "git show --textconv HEAD:notes.txt",
        "cd bare.git && git log -p",
        "cd bare.git && git show HEAD",
        "cd bare.git; git diff HEAD~1 HEAD",
        "git --git-dir=bare.git log -p",
        "git -C bare.git log -p",
        "GIT_DIR=bare.git git log -p",
        f"GIT_EXTERNAL_DIFF={canary} git diff HEAD~1",
        f"GIT_PAGER={canary} git -p log",
        "HOME=. git log -p",
        "export HOME=.; git diff HEAD~1",
        "git log -p HEAD~1..HEAD",
        "git diff HEAD~1 -- notes.txt",
        "git status --porcelain",
    )


def _others(canary: str) -> Iterator[str]:
    yield from (
        f"rg --pre {canary} hello",
        f"rg --pre={canary} hello",
        f"rg --pr={canary} hello",
        "rg -z hello",
        "rg --search-zip hello",
        f"rg --hostname-bin={canary} hello",
        "rg hello *",
        "rg -e hello -- *",
        "sort -o written.txt notes.txt",
        "sort --output=written.txt notes.txt",
        "sort --out=written.txt notes.txt",
        f"sort --compress-program={canary} -S 1 notes.txt",
        f"sort --compress={canary} -S 1 notes.txt",
        "sort -T . notes.txt",
        "sort *",
        "tree -o written.txt",
        "tree -R -H x",
        "file -C -m notes.txt",
        "file -z notes.txt",
        "diff -l notes.txt src/b.txt",
        "diff --paginate notes.txt src/b.txt",
        "uniq notes.txt written.txt",
        "date -s 2020-01-01",
        "date 0101",
        f"echo {canary} | xargs sh -c",
        f"echo notes.txt | xargs {canary}",
        f"env {canary}",
        f"nice {canary}",
        f"timeout 5 {canary}",
        f"stdbuf -o0 {canary}",
        "less notes.txt",
        f"man -P {canary} ls",
        f"vim -c '!{canary}' -c q",
        f"tar --to-command={canary} -xf a.tar",
        f"tar -cf written.tar --checkpoint=1 --checkpoint-action=exec={canary} notes.txt",
        f"tar -I {canary} -xf a.tar",
        "echo x | tee written.txt",
        "xxd -r notes.txt written.txt",
        "zcat x.gz",
        "jq -n 'input' notes.txt",
        "jq --rawfile x .env -n '$x'",
        "jq -n '$__loc__'",
        "echo x > written.txt",
        "cat notes.txt > written.txt",
        "cat < /dev/tcp/127.0.0.1/80",
        f"echo $({canary})",
        f"echo `{canary}`",
        f"cat <({canary})",
        f"x=$({canary})",
        f"echo ${{x:-$({canary})}}",
        f"x='$({canary})'; echo ${{x@P}}",
        f"{canary}",
        f"command {canary}",
        f"exec {canary}",
        f"eval {canary}",
        f". {canary}",
        "PATH=bin:$PATH canary",
        f"printf '%s\\n' {canary} | sh",
        f"ls; {canary}",
        f"ls && {canary}",
        f"ls | {canary}",
        f"( {canary} )",
        f"{{ {canary}; }}",
        f"f() {{ {canary}; }}; f",
        f"alias ls={canary}; ls",
        f"'{canary}'",
        f"\\{canary}",
        "cat .gitconfig",
        "echo '[core] pager = ./canary' > .gitconfig",
        "echo '* diff=canary' >> .gitattributes",
        "cp .gitconfig .git/config",
    )


def _option_sweep() -> Iterator[str]:
    """Every option spelling the allow-lists accept without a value, each run once, so
    the sandbox checks the lists' claim that none of them writes or starts a program."""
    specs: dict[str, Options] = {
        name: value
        for module in (shell_readonly, shell_sed)
        for name, value in vars(module).items()
        if isinstance(value, Options)
    }
    tools = {"_DIFF": "diff", "_SORT": "sort", "_UNIQ": "uniq", "_TREE": "tree", "_FILE": "file"}
    tools |= {"_DATE": "date", "_RG": "rg", "_HOSTNAME": "hostname", "SED": "sed -n p"}
    operands = {"diff": "notes.txt src/b.txt", "date": "", "hostname": "", "tree": "src"}
    for key, tool in tools.items():
        spec = specs[key]
        tail = operands.get(tool, "notes.txt")
        yield from (f"{tool} -{flag} {tail}" for flag in spec.flags)
        yield from (
            f"{tool} --{flag} {tail}" for flag in sorted(spec.long_flags | spec.long_optional)
        )
    for sub, spec in shell_git.SUBCOMMANDS.items():
        yield from (f"git {sub} -{flag}" for flag in spec.flags)
        yield from (f"git {sub} --{flag}" for flag in sorted(spec.long_flags | spec.long_optional))


def _quoting(command: str) -> Iterator[str]:
    """Spelling variants the shell reads alike: quoted command names, `$'..'` text."""
    yield command
    head, _, rest = command.partition(" ")
    if head.isalpha():
        yield f"'{head}' {rest}"
        yield f'"{head}" {rest}'
        yield f"\\{head} {rest}"
    if "'" in command:
        yield re.sub(r"'([^'\\]*)'", lambda m: "$'" + m.group(1) + "'", command, count=1)
        yield command.replace("'", '"', 2)


def full_corpus() -> list[str]:
    """Every command the grammar makes, in a fixed order, without duplicates."""
    commands: list[str] = list(MUST_ALLOW)
    for canary in _CANARIES:
        for family in (_sed, _test, _find, _awk, _gits, _others):
            for command in family(canary):
                commands.extend(_quoting(command))
    for command, target in itertools.product(("cat", "head -n1", "wc -l", "ls -l"), _FILES):
        commands.append(f"{command} {target}")
    commands.extend(_option_sweep())
    return list(dict.fromkeys(commands))


def corpus(size: int, seed: int) -> list[str]:
    """`size` commands, always with MUST_ALLOW: a sample of the full corpus, or all of it
    and then lines joining two of its commands (`a; b`, `a | b`, `a && b`, `a || b`)."""
    everything = full_corpus()
    chooser = random.Random(seed)
    if size < len(everything):
        rest = [command for command in everything if command not in MUST_ALLOW]
        return [*MUST_ALLOW, *chooser.sample(rest, max(0, size - len(MUST_ALLOW)))]
    # Mostly allowed commands on the left, so joined lines still reach the sandbox.
    allowed = [command for command in everything if classify(command).allowed]
    joined = dict.fromkeys(everything)
    for _ in range(size * 3):
        if len(joined) >= size:
            break
        left = chooser.choice(allowed)
        right = chooser.choice(allowed if chooser.random() < 0.15 else everything)
        joined[f"{left}{chooser.choice(('; ', ' | ', ' && ', ' || '))}{right}"] = None
    return list(joined)


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
_RESULT = re.compile(r"= (-?\d+)")


def traced_programs(trace: str) -> dict[int, list[str]]:
    """Programs that started, per command index (after its marker `/bin/true`)."""
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
                pending[pid] = path
                continue
        else:
            path = pending.pop(pid, "")
        result = _RESULT.search(line.rsplit(")", 1)[-1])
        if current is not None and path and result and result.group(1) == "0":
            segments[current].append(path)
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
        if "canary" in path or workspace_hint in path:
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
            env = {**os.environ, "PATH": os.environ.get("PATH", "/usr/bin:/bin") + ":bin"}
            procs.append(
                subprocess.Popen(argv, cwd=Path(__file__).resolve().parent.parent, env=env)
            )
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
