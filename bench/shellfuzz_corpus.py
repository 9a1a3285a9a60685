"""The generated corpus of `python -m bench shellfuzz`: read-only commands x options x
payloads that try to start the canary, write a file or read a protected one x spellings
(option forms, quoting), and a sweep of every option spelling the allow-lists accept.
Deterministic for a seed."""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator

from tether_common.safety import classify, shell_git, shell_readonly, shell_sed
from tether_common.safety.shell_options import Options

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


def _descriptors(canary: str) -> Iterator[str]:
    """Writes through a reopened descriptor (bash opens `/dev/fd/N` anew, for writing),
    here-documents, named descriptors and `exec` redirections; locale variables and
    globs that reach protected names (issue 28)."""
    targets = (
        "/dev/fd/{n}",
        "/dev/fd//{n}",
        "/dev/./fd/{n}",
        "/proc/self/fd/{n}",
        "/proc/thread-self/fd/{n}",
        "/proc/$$/fd/{n}",
        "/proc/$BASHPID/fd/{n}",
    )
    opens = {
        "3<notes.txt": 3,
        "3<>notes.txt": 3,
        "1<notes.txt": 1,
        "2<notes.txt": 2,
        "<notes.txt": 0,
        "0<notes.txt": 0,
        "9<src/a.py": 9,
        "3<.gi?/config": 3,
        "3<.git/config": 3,
    }
    for opened, n in opens.items():
        for target in targets:
            path = target.format(n=n)
            for write in (">", ">>", ">|", "&>", "<>"):
                yield f"echo {canary} {opened} {write}{path}"
            yield f"cat src/b.txt {opened} >{path}"
            yield f"{{ echo x >{path}; }} {opened}"
            yield f"(echo x >{path}) {opened}"
            yield f"exec {opened}; echo x >{path}"
            yield f"exec {opened}; ls >{path}"
        yield f"echo x {opened} >/dev/stdout" if n == 1 else f"echo x {opened} >/dev/stderr"
        yield f"echo x {opened} 1>&{n} >/dev/stdout"
        yield f"echo x {opened} 2>&{n} >/dev/stderr"
    yield from (
        "echo x {fd}<notes.txt >/dev/fd/10",
        "echo x {fd}<notes.txt >>/dev/fd/10",
        "echo x {fd}<notes.txt >/proc/self/fd/10",
        "echo x {fd}<>notes.txt >&$fd",
        "exec {fd}<notes.txt; echo x >/dev/fd/$fd",
        "exec 3<notes.txt; exec 1>/dev/fd/3; echo x",
        "exec 1<notes.txt; echo x >/dev/stdout",
        "exec 2<notes.txt; ls nonexist 2>/dev/stderr",
        "exec 3<>notes.txt; echo x >&3",
        "cat <<EOF >/dev/fd/3 3<notes.txt\nx\nEOF",
        "cat <<'EOF' 3<notes.txt >/dev/fd/3\nx\nEOF",
        "cat <<<x 3<notes.txt >/dev/fd/3",
        "cat 0<<<x >/dev/fd/0",
        "cat <<<x >/dev/stdin",
        "echo x >/dev/stdout",
        "echo x >/dev/stderr",
        "echo x 2>&1 >/dev/stderr",
        "ls 2>/dev/null >/dev/stdout",
        "echo x >/dev/tty",
        "echo x >/dev/zero",
        "echo x >/dev/full",
        "echo x >/proc/self/cwd/notes.txt",
        "echo x >/proc/self/root/tmp/x",
        "cat .gi?/config",
        "cat .gi[t]/config",
        "cat .g*/config",
        "cat .git/conf*",
        "cat .git/c?nfig",
        "cat {.git,src}/config",
        "cat .{g,x}it/config",
        "cat .gi{s..u}/config",
        "head -c 100 .[g]it/config",
        "grep -r url .gi?",
        "ls .gi?/",
        "cat .e?v",
        "cat .en[v]",
        "cat ./*/../.e*",
        "wc -c .gitconfi?",
        "LANGUAGE=../../../tmp/x LC_ALL=C.UTF-8 ls nonexist",
        "LANGUAGE=x/y ls nonexist",
        "LC_ALL=../x ls nonexist",
        "TZ=/tmp/zone date",
        "TZ=:../../x date",
        "LC_MESSAGES=%n ls nonexist",
        "LANG=C.UTF-8 ls nonexist",
        "LC_ALL=C sort notes.txt",
        "x=1 ls",
        "GIT_DIR=bare.git git log -p",
        "LANG=../../x; ls nonexist",
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
        for family in (_sed, _test, _find, _awk, _gits, _others, _descriptors):
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
