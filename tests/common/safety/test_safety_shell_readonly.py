"""Read-only means every word understood (issue 13): commands on the read-only list that
could run code or write files through an option, a script, an expression or arithmetic
ask, in every spelling; truly read-only uses of the same commands stay allowed."""

from __future__ import annotations

import itertools

import pytest

from tether_common.safety import classify
from tether_common.safety.protected import protected_component, protected_name

RUN = ("id", "./canary", "canary", "/tmp/x", "touch pwned")


def _sed_attacks() -> list[str]:
    scripts = [
        "e {c}",
        "1e {c}",
        "$e {c}",
        "/x/e {c}",
        "1!e {c}",
        "1,3e {c}",
        "p;e {c}",
        "p ; e {c}",
        "s/.*/{c}/e",
        "s/x/y/ge",
        "s/x/y/eg",
        "s/x/y/2e",
        "s|.*|{c}|e",
        "s,x,y,e",
        "s/x/y/;e {c}",
        "1{{e {c}\n}}",
        ":a;e {c}",
        "b end;e {c}",
        "e",
        "w out",
        "1w out",
        "W out",
        "/x/w out",
        "s/x/y/w out",
        "s/x/y/gw out",
        "r .env",
        "1r /etc/passwd",
        "R x",
        "y/a/b/;w out",
        "s/x/y/ w out",
        "s/x/y/ e",
        "v;e {c}",
    ]
    spellings = [
        "sed '{s}' f",
        'sed "{s}" f',
        "sed -e '{s}' f",
        "sed -e'{s}' f",
        "sed -n -e '{s}' f",
        "sed -ne '{s}' f",
        "sed -nEe '{s}' f",
        "sed -s -e '{s}' f",
        "sed -z -e '{s}' f",
        "sed -u -e '{s}' f",
        "sed -E '{s}' f",
        "sed --expression='{s}' f",
        "sed --expression '{s}' f",
        "sed --posix -e '{s}' f",
        "sed --debug --expression='{s}' f",
        "sed f -e '{s}'",
        "sed -n -e p -e '{s}' f",
        "sed -e p --expression='{s}' f",
        "sed -l 5 -e '{s}' f",
        "sed --quiet -e '{s}' -- f",
    ]
    out = []
    for script, spelling, command in itertools.product(scripts, spellings, RUN[:2]):
        out.append(spelling.replace("{s}", script.replace("{c}", command)))
    return out


SED_ATTACKS = _sed_attacks()
SED_SPELLINGS = [
    "sed -ee f",  # the script is "e": -e's value is the rest of the cluster
    "sed -nee f",
    "sed -n -ee f",
    "sed -sne f",
    "echo id | sed -ee",
    "echo id | sed e",
    "echo id | sed --expr=e",
    "echo id | sed --exp=e",
    "echo id | sed --e=e",
    "echo id | sed --expre e",
    "sed -f script.sed f",
    "sed -fscript.sed f",
    "sed -nf script.sed f",
    "sed --file=script.sed f",
    "sed --file script.sed f",
    "sed --fil=script.sed f",
    "sed --f=script.sed f",
    "sed -i s/a/b/ f",
    "sed -i.bak s/a/b/ f",
    "sed -ni p f",
    "sed -in p f",
    "sed -n -i p f",
    "sed --in-place s/a/b/ f",
    "sed --in-place=.b s/a/b/ f",
    "sed --in-pl s/a/b/ f",
    "sed --in s/a/b/ f",
    "sed -s -i s/a/b/ f",
    "sed s/a/b/ -i f",
    "sed s/a/b/ f -i",
    "sed --sandbox -e 'e id' f",
    'sed -e "$x" f',
    'sed "$x" f',
    "sed $x f",
    "sed -n p $x",
    "sed -n p *",
    "sed -n p ./*.txt -e 'e id'",
    'sed -n "$(echo p)" f',
    "sed -n $'e id' f",
    "sed -n -e `echo p` f",
    "sed -nZ p f",
    "sed --follow p f -e 'w x'",
]

TEST_ATTACKS = [
    template.format(sub=sub)
    for sub in ("a[$(id)]", "a[$(./canary)]", "a[`id`]", "x[$(touch p)]", "a[${x}]")
    for template in (
        "test -v '{sub}'",
        "[ -v '{sub}' ]",
        "[[ -v '{sub}' ]]",
        "test ! -v '{sub}'",
        "[ ! -v '{sub}' ]",
        "test 1 -eq 1 -a -v '{sub}'",
        "test -f x -o -v '{sub}'",
        "test \\( -v '{sub}' \\)",
        "[ \\( -v '{sub}' \\) ]",
        "x='{sub}'; test -v \"$x\"",
        "x='{sub}'; [ -v \"$x\" ]",
        "x='{sub}'; [ -v $x ]",
        "x=-v; test \"$x\" '{sub}'",
        "x=-v; [ $x '{sub}' ]",
        "x='{sub}'; [[ $x -eq 1 ]]",
        "x='{sub}'; [[ x -eq 1 ]]",
        "x='{sub}'; [[ 1 -lt x ]]",
        "x='{sub}'; ((x))",
        "x='{sub}'; (( x + 1 ))",
        "x='{sub}'; echo $((x))",
        "x='{sub}'; echo \"$((x))\"",
        "x='{sub}'; echo $[x]",
        "x='{sub}'; for ((i=x;0;)); do :; done",
        "x='{sub}'; ls; ((x))",
        "((ls))",
        "printf -v '{sub}' x",
        "printf -v x '%s' 1",
        "printf -vx '%s' 1",
        "x=-v; printf $x y z",
        "read '{sub}' <<< 1",
        "let '{sub}'",
        "declare -i y; y='{sub}'",
        'test "$a" "$b"',
        'test "$a" "$b" "$c" "$d" "$e"',
        "[ $x ]",
    )
]

FIND_ATTACKS = [
    f"{start} {action}"
    for start in (
        "find .",
        "find . -name x",
        "find -L . -type f",
        "find src -o",
        "find . \\( -name x \\)",
    )
    for action in (
        "-exec id \\;",
        "-exec id {} +",
        "-execdir id \\;",
        "-ok id \\;",
        "-okdir id \\;",
        "-delete",
        "-fprint out",
        "-fprint0 out",
        "-fprintf out %p",
        "-fls out",
        "-newer x -delete",
        "-not -exec id ;",
        "$x",
        '"$x"',
        "-name $x",
        "-name *",
        "-name ./x -unknown-primary",
    )
] + ["find $x", 'find "$x"', "find *", "find . -D exec -exec id \\;"]

AWK_ATTACKS = [
    f"{name} {options}'{program}' f"
    for name in ("awk", "gawk", "mawk", "nawk")
    for options in ("", "-F: ", "-v x=1 ", "-- ")
    for program in (
        'BEGIN{system("id")}',
        'BEGIN { system ("id") }',
        'BEGIN{print | "sh"}',
        'BEGIN{print |& "sh"}',
        'BEGIN{"id" | getline x}',
        'BEGIN{getline x < "/etc/passwd"}',
        'BEGIN{print 1 > "out"}',
        'BEGIN{printf "x" >> "out"}',
        'BEGIN{f="system"; @f("id")}',
        '@load "filefuncs"; BEGIN{}',
        '/"/ {system("id")}',
        'BEGIN{close("x")}',
    )
] + [
    "awk -f prog.awk f",
    "awk -fprog.awk f",
    "gawk --file=prog.awk f",
    "gawk -e 'BEGIN{}' f",
    "gawk --source='BEGIN{}' f",
    "gawk -i inc 'BEGIN{}'",
    "gawk -l ext 'BEGIN{}'",
    "gawk -o 'BEGIN{}'",
    "gawk --pretty-print=out 'BEGIN{}'",
    "gawk -p 'BEGIN{}'",
    "gawk -d 'BEGIN{}'",
    "mawk -W exec prog.awk",
    'awk "$p" f',
    "awk $p f",
    "awk '{print}' $x",
    "awk -v $x '{print}' f",
]

GIT_ATTACKS = [
    "git -c core.pager=id log",
    "git -c diff.external=id diff",
    "git -ccore.pager=id log",
    "git --config-env=core.pager=X log",
    "git --exec-path=. log",
    "git --exec-path log",
    "git --git-dir=other log",
    "git --work-tree=/ status",
    "git -C other log",
    "git --namespace=x log",
    "git -p log",
    "git --paginate log",
    "git --help",
    "git help log",
    "git log --output=out",
    "git log --output out",
    "git log --outp=out",
    "git log --out=out",
    "git log -p --ext-diff",
    "git diff --ext-diff",
    "git diff --output=out",
    "git diff --textconv",
    "git log --textconv -p",
    "git show --show-signature",
    "git log --show-signature",
    "git log -O order",
    "git diff -Oorder",
    "git grep -Oid x",
    "git grep -O x",
    "git grep --open-files-in-pager=id x",
    "git grep --open-files-in-pager x",
    "git grep --open x",
    "git grep -f patterns x",
    "git grep --textconv x",
    "git ls-remote --upload-pack=id .",
    "git fetch --upload-pack=id .",
    "git clone --upload-pack=id . x",
    "git archive --remote=. HEAD",
    "git l",
    "git config core.pager id",
    "git config --get core.pager",
    "git difftool",
    "git bisect run id",
    "git rebase --exec id",
    "git submodule foreach id",
    "git log $x",
    'git log "$x"',
    "git $x",
    "git log --format=%H $(id)",
    "cd other && git log",
    "cd other; git diff",
    "GIT_DIR=other git log",
    "GIT_EXTERNAL_DIFF=id git diff",
    "GIT_PAGER=id git -p log",
    "HOME=. git log",
    "GIT_CONFIG_GLOBAL=.gitconfig git log",
    "export GIT_PAGER=id; git log",
    "git status --untracked-files=all --porcelain --output=x",
    "git log -G -- --output=x",
    "git log -S -- --output=x",
    "git log -n -- --output=x",
    "git grep -e -- --open-files-in-pager=id x",
]

OTHER_ATTACKS = [
    "rg --pre id x",
    "rg --pre=id x",
    "rg --pr=id x",
    "rg --pre-glob '*' --pre id x",
    "rg -z x",
    "rg --search-zip x",
    "rg -zi x",
    "rg --hostname-bin=id x",
    "rg x *",
    "rg x $f",
    "sort -o out f",
    "sort -oout f",
    "sort -ro out f",
    "sort --output=out f",
    "sort --out=out f",
    "sort --o=out f",
    "sort --compress-program=id f",
    "sort --compress=id f",
    "sort -T . f",
    "sort --temporary-directory=. f",
    "sort *",
    "sort $f",
    "tree -o out",
    "tree -R -H x",
    "tree --fromfile x",
    "file -C -m x",
    "file --compile",
    "file -z x",
    "file -Z x",
    "file --uncompress x",
    "diff -l a b",
    "diff --paginate a b",
    "diff --pag a b",
    "uniq f out",
    "uniq -c f out",
    "date -s 2020-01-01",
    "date --set=2020-01-01",
    "date 0101",
    "date $x",
    "hostname x",
    "hostname -F f",
    "printf -v PATH x",
    "grep -f.env x",
    "grep -nf.env x",
    "date -f.env",
    "jq --rawfile x .env -n '$x'",
    "sed -n p .env",
    "set -o vi",
    "set",
    "cat < /dev/tcp/127.0.0.1/80",
    "wc -l < /dev/udp/127.0.0.1/53",
    "echo id | xargs sh -c",
    "echo x | xargs id",
    "env id",
    "nice id",
    "timeout 5 id",
    "stdbuf -o0 id",
    "less f",
    "more f",
    "man ls",
    "man -P id ls",
    "vim f",
    "view f",
    "tar --to-command=id -xf a.tar",
    "tar -xf a.tar --checkpoint-action=exec=id",
    "tar -I id -xf a.tar",
    "tee out",
    "xxd -r f out",
    "zcat x.gz",
    "bzcat x.bz2",
    "curl example.com",
    "wget example.com",
    "python3 -c 'print(1)'",
    "perl -e 1",
    "node -e 1",
    "ruby -e 1",
]

TRULY_READ_ONLY = [
    "sed -n 1,5p file",
    "sed -n '1,5p' file",
    "sed -n '/x/p' f",
    "sed -n '/x/,/y/p' f",
    "sed -n '$p' f",
    "sed -n -e 1p -e '$p' f",
    "sed -n --expression=1p f",
    "sed 's/a/b/g' f",
    "sed -E 's/(a)/\\1b/2' f",
    "sed 's|a|b|g' f",
    "sed 's/x/y/;s/a/b/' f",
    "sed '1d;$d' f",
    "sed -n '1{p;q}' f",
    "sed '/^#/d' f",
    "sed 'y/abc/ABC/' f",
    "sed '0~2d' f",
    "sed -n '/start/,+3p' f",
    "sed '$!N;P;D' f",
    "sed = f",
    "sed -z 's/\\n/,/g' f",
    "sed -n l f",
    "sed 'a text' f",
    "sed '1i header' f",
    "sed -s -n 1p a b",
    "sed --quiet --regexp-extended 's/a+/b/p' f",
    "grep -rn foo .",
    "grep -rn 'a|b' --include='*.py' src",
    "grep -e -x f",
    "git log",
    "git log --oneline -5",
    "git log -n 5 --stat",
    "git log -p -- file",
    "git log --author=me --since=2.weeks",
    "git log --format='%h %s' --graph --all",
    "git log --pretty=oneline --abbrev-commit",
    "git log -S foo",
    "git log -Sfoo",
    "git status",
    "git status -sb",
    "git status --porcelain=v1 -uno",
    "git diff",
    "git diff --cached",
    "git diff --stat HEAD~1",
    "git diff --no-ext-diff --no-textconv HEAD~1 -- f",
    "git diff -U5 a b",
    "git diff --word-diff=color",
    "git show HEAD:file",
    "git show --stat HEAD",
    "git --no-pager log -1",
    "git blame -L 1,5 f",
    "git ls-files -z --others --exclude-standard",
    "git rev-parse --show-toplevel",
    "git rev-parse --abbrev-ref HEAD",
    "git grep -n foo",
    "git grep -e -foo -- '*.py'",
    "git describe --tags --always",
    "git shortlog -sn",
    "find . -name '*.py'",
    "find . -type f -newer x -print0",
    "find . -maxdepth 2 -name x -o -name y",
    "find src \\( -name a -o -name b \\) -prune",
    "find . -newermt 2020-01-01 -ls",
    "find -L . -mtime -1 -printf '%p\\n'",
    "awk '{print $1}' f",
    "awk -F: '{print $1}' /etc/passwd",
    "awk -v n=2 'NR==n' f",
    "awk 'NF' f",
    "test -f f",
    "test -v x",
    "[ -d src ]",
    '[ "$a" = "$b" ]',
    '[ -z "$x" ]',
    '[ ! -e "$f" ]',
    'test "$x" -eq 1',
    "test 'a[$(id)]' -eq 1",
    "printf '%s\\n' a b",
    "printf -- '-%s\\n' a",
    "sort -u -k2,2 f",
    "sort -t: -k3 -n /etc/passwd",
    "sort --check f",
    "uniq -c f",
    "diff -u a b",
    "diff -ru a b",
    "diff --unified=3 a b",
    "tree -L 2 -a",
    "rg -n 'def ' src",
    "rg --files",
    "rg -e foo -g '*.py' -tpy",
    "file -b --mime-type f",
    "date +%s",
    "date -u -d '1 day ago' +%F",
    "hostname",
    "hostname -f",
    "jq -n 'input' f",
    "jq --rawfile x notes -n '$x'",
    "cat f | sort | uniq -c | head",
    "ls *.py",
    "wc -l $f",
]


@pytest.mark.parametrize("command", SED_ATTACKS + SED_SPELLINGS)
def test_sed_that_runs_writes_or_reads_asks(command: str) -> None:
    assert classify(command).decision != "allow", command


@pytest.mark.parametrize("command", TEST_ATTACKS)
def test_subscripts_and_arithmetic_ask(command: str) -> None:
    assert classify(command).decision != "allow", command


@pytest.mark.parametrize("command", FIND_ATTACKS + AWK_ATTACKS)
def test_find_and_awk_programs_that_run_or_write_ask(command: str) -> None:
    assert classify(command).decision != "allow", command


@pytest.mark.parametrize("command", GIT_ATTACKS)
def test_git_that_runs_other_programs_or_config_asks(command: str) -> None:
    assert classify(command).decision != "allow", command


@pytest.mark.parametrize("command", OTHER_ATTACKS)
def test_options_that_run_or_write_ask(command: str) -> None:
    assert classify(command).decision != "allow", command


@pytest.mark.parametrize("command", TRULY_READ_ONLY)
def test_truly_read_only_commands_stay_allowed(command: str) -> None:
    verdict = classify(command)
    assert verdict.decision == "allow", (command, verdict.reasons)


@pytest.mark.parametrize(
    ("option", "command"),
    [
        ("--expression", "sed {o}=p f"),
        ("--output", "sort {o}=x f"),
        ("--compress-program", "sort {o}=id f"),
        ("--file", "sed {o}=s f"),
        ("--in-place", "sed {o} p f"),
        ("--pre", "rg {o}=id x"),
        ("--paginate", "diff {o} a b"),
    ],
)
def test_no_long_option_abbreviation_is_allowed(option: str, command: str) -> None:
    """GNU getopt_long takes any unambiguous prefix; none is ever allowed, whatever it
    abbreviates (an exact match elsewhere would be another option)."""
    for end in range(3, len(option)):
        prefix = option[:end]
        assert classify(command.format(o=prefix)).decision != "allow", prefix


@pytest.mark.parametrize("quote", ["'{w}'", '"{w}"', "\\{w}", "{w}"])
@pytest.mark.parametrize("word", ["sed", "git", "find", "awk", "sort", "test"])
def test_quoted_command_names_never_unlock_attacks(quote: str, word: str) -> None:
    attacks = {
        "sed": "-ee f",
        "git": "-c core.pager=id log",
        "find": ". -delete",
        "awk": "'BEGIN{system(\"id\")}'",
        "sort": "-o out f",
        "test": "-v 'a[$(id)]'",
    }
    command = f"{quote.format(w=word)} {attacks[word]}"
    assert classify(command).decision != "allow", command


@pytest.mark.parametrize(
    "name",
    [".gitconfig", ".gitattributes", ".bashrc", ".profile", ".zshrc", ".lesskey", ".hg", ".git"],
)
def test_config_read_by_programs_is_protected(name: str) -> None:
    assert protected_name(name)
    assert protected_name(name.upper())
    assert protected_component([".config", "git", "config"]) == ".config/git"
    for command in (f"echo x > {name}", f"echo x >> sub/{name}", f"cat {name}", f"cp a {name}"):
        assert classify(command).decision != "allow", command
