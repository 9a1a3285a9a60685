"""The shell classifier against issue 28's breaks, each class with many spellings:
writes through a reopened descriptor (bash opens `/dev/fd/N` anew, for writing), globs
that reach a protected name at any path component, and assignments that hand a program
a path through a locale or zone variable."""

from __future__ import annotations

import itertools

import pytest

from tether_common.safety import classify
from tether_common.safety.protected import glob_may_match_protected
from tether_common.safety.shell_deny import descriptor_of, write_target

# ------------------------------------------------------------------ descriptors

_OPENS = {
    "3<app.py": 3,
    "3<>app.py": 3,
    "1<app.py": 1,
    "2<app.py": 2,
    "<app.py": 0,
    "0<app.py": 0,
    "9<src/a.py": 9,
    "{fd}<app.py": 10,
}
_PATHS = (
    "/dev/fd/{n}",
    "/dev//fd/{n}",
    "/dev/./fd/{n}",
    "/dev/fd/../fd/{n}",
    "/proc/self/fd/{n}",
    "/proc/thread-self/fd/{n}",
    "/proc/self/./fd/{n}",
)
_WRITES = (">", ">>", ">|", "&>", "&>>", "1>", "2>")
_REOPENING = sorted(
    {
        f"echo X {opened} {write}{path.format(n=n)}"
        for (opened, n), path, write in itertools.product(_OPENS.items(), _PATHS, _WRITES)
    }
)


@pytest.mark.parametrize("command", _REOPENING)
def test_a_write_through_a_reopened_descriptor_asks(command: str) -> None:
    assert classify(command).decision == "ask", command


@pytest.mark.parametrize(
    "command",
    [
        "echo X 2<app.py >/dev/stderr",
        "echo X 1<app.py >>/dev/stdout",
        "echo X <app.py >/dev/fd/0",
        "echo X >/dev/stdin",
        "echo X 3<app.py 1>&3 >/dev/stdout",
        "echo X 3<app.py 2>&3 >/dev/stderr",
        "echo X 2<app.py 1>&2 >/dev/stdout",  # found by the differential fuzz
        "echo X 1<app.py 2>&1 >/dev/stderr",
        "echo X 1<app.py 2>/dev/stdout >/dev/stderr",
        "echo X 1>&- >/dev/stdout",
        "echo X >app.py >/dev/stdout",
        "{ echo X >/dev/stdout; } 1<app.py",
        "{ echo X >/dev/fd/1; } 1<app.py",
        "( echo X >/dev/stderr ) 2<app.py",
        "for i in 1; do echo X >/dev/stdout; done 1<app.py",
        "echo X >/dev/stdout; echo Y 1<app.py",
        "exec 3<app.py; echo X >/dev/fd/3",
        "exec 1<app.py; echo X >/dev/stdout",
        "echo X > /proc/1/fd/1",
        "echo X > /proc/$$/fd/1",
        "echo X > /proc/$BASHPID/fd/3",
        "echo X >/dev/fd/$n",
        "echo X >/dev/fd/?",
        "echo X >/proc/self/cwd/app.py",
        "echo X >/proc/self/root/etc/x",
        "echo X >/dev/tty",
        "echo X >/dev/zero",
        "echo X >/dev/pts/0",
        "cat <<<x 3<app.py >/dev/fd/3",
    ],
)
def test_other_descriptor_tricks_ask(command: str) -> None:
    assert classify(command).decision == "ask", command


@pytest.mark.parametrize(
    "command",
    [
        "echo x >/dev/stdout",
        "echo x >/dev/stderr",
        "echo x >>/dev/stderr",
        "echo x 2>&1 >/dev/stderr",
        "echo x >&2",
        "ls 2>/dev/null",
        "ls &>/dev/null",
        "ls >/dev/null 2>&1",
        "cat notes.txt >/proc/self/fd/1",
        "cat <notes.txt >/dev/stdout",
        "grep -n x notes.txt 2>/dev/stdout",
        "cat notes.txt 1>/dev/stderr 2>/dev/stdout",
    ],
)
def test_writes_to_the_inherited_output_are_still_allowed(command: str) -> None:
    assert classify(command).allowed, (command, classify(command).reasons)


@pytest.mark.parametrize(
    ("path", "fd"),
    [
        ("/dev/stdout", 1),
        ("/dev/stderr", 2),
        ("/dev/stdin", 0),
        ("/dev/fd/7", 7),
        ("//dev/fd//12", 12),
        ("/proc/self/fd/3", 3),
        ("/proc/thread-self/fd/4", 4),
        ("/proc/1/fd/3", None),
        ("/dev/null", None),
        ("/dev/fd", None),
        ("app.py", None),
    ],
)
def test_descriptor_paths(path: str, fd: int | None) -> None:
    assert descriptor_of(path) == fd


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/dev/null", "harmless"),
        ("/dev/stdout", "descriptor"),
        ("/dev/fd/3", "descriptor"),
        ("/dev/tty", "file"),
        ("/dev/zero", "file"),
        ("/dev/pts/0", "file"),
        ("/proc/1/fd/1", "file"),
        ("/dev/tcp/h/80", "network"),
    ],
)
def test_only_dev_null_is_harmless_by_itself(path: str, target: str) -> None:
    assert write_target(path) == target


# ------------------------------------------------------------- protected globs

_GLOBBED_GIT = (
    ".gi?/config",
    ".g?t/config",
    ".??t/config",
    ".g*/config",
    ".*t/config",
    ".[g]it/config",
    ".[a-z]it/config",
    ".gi[!x]/config",
    ".gi[^x]/config",
    "{.git,src}/config",
    ".{g,x}it/config",
    ".gi{s..u}/config",
    ".git/conf*",
    ".git/c?nfig",
    ".git/{config,HEAD}",
    "./.gi?/config",
    "src/../.gi?/config",
    ".gi?",
    ".gi?/",
    ".GI?/config",
    ".e?v",
    ".en[v]",
    ".env.*",
    "x/.ss?/id_rsa",
    ".ss*/authorized_keys",
    "*/.ssh/*",
    ".docker/conf*.json",
    ".d*/config.json",
    ".config/g?",
    "*.pem",
    "keys/*.key",
    "id_*",
    "credentials*.json",
)


@pytest.mark.parametrize("pattern", _GLOBBED_GIT)
def test_a_glob_reaching_a_protected_name_at_any_component_asks(pattern: str) -> None:
    assert glob_may_match_protected(pattern), pattern
    for command in (f"cat {pattern}", f"grep -r url {pattern}", f"wc -c <{pattern}"):
        assert classify(command).decision == "ask", command


@pytest.mark.parametrize(
    "pattern",
    ["@(.git)/config", "+(.git)/config", "*(.git)/config", "?(.git)/config", ".!(x)/config"],
)
def test_extglob_groups_count_as_anything(pattern: str) -> None:
    assert glob_may_match_protected(pattern), pattern
    assert classify(f"shopt -s extglob; cat {pattern}").decision == "ask"


@pytest.mark.parametrize(
    "command",
    ["ls *", "cat src/*.py", "cat */*", "ls src/{a,b}.py", "cat notes.*", "ls -d src/?"],
)
def test_ordinary_globs_are_still_allowed(command: str) -> None:
    assert classify(command).allowed, (command, classify(command).reasons)


# ------------------------------------------------------------------ assignments

_PATHS_IN_VALUES = ("../../ws/n", "/ws/n", ":/ws/zone", "x/y", "..", "a..b", "%n%n", "%p")
_NAMED = ("LANGUAGE", "LANG", "LC_ALL", "LC_MESSAGES", "LC_CTYPE", "TZ", "TERM")


@pytest.mark.parametrize(
    "command",
    [
        *(f"{name}={value} ls nonexist" for name in _NAMED for value in _PATHS_IN_VALUES),
        *(f"{name}={value}; ls nonexist" for name in _NAMED for value in _PATHS_IN_VALUES),
        "LANGUAGE=../../ws/n LC_ALL=C.UTF-8 ls nonexist",
        'LANG="$x" ls',
        "LANG=$(id) ls",
        "LC_ALL='a b' ls",
        "x=1 ls",
        "PATH=. ls",
        "LOCPATH=. ls",
        "NLSPATH=x ls",
        "GCONV_PATH=. ls",
        "TERMINFO=. ls",
        "http_proxy=x; ls",
    ],
)
def test_assignments_that_are_not_plain_ask(command: str) -> None:
    assert classify(command).decision == "ask", command


@pytest.mark.parametrize(
    "command",
    [
        "LC_ALL=C sort notes.txt",
        "LANG=C.UTF-8 ls",
        "LANGUAGE=de:en ls nonexist",
        "TZ=UTC date",
        "TZ=America-New_York date",
        "TERM=xterm-256color ls",
        "COLUMNS=80 ls",
        "x=1; echo $x",
    ],
)
def test_plain_assignments_are_still_allowed(command: str) -> None:
    assert classify(command).allowed, (command, classify(command).reasons)
