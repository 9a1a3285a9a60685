"""The git configuration the sandbox lets git read (`sandbox/gitconfig.py`), against
git's own list of documented keys (`git help --config`): every key that names a program
or a file must be pinned, read only from config the sandbox does not give, or left out
of the sanitised copy of a repository's config; and the copy itself."""

from __future__ import annotations

import re
import subprocess

import pytest

from tether_tools_runner.sandbox.gitconfig import KEEP, PINS, kept, pin_env, sanitise

# Words in a key's name that suggest it names a program or a file; over-inclusive on
# purpose, so a new key of a new git is judged before it is let through.
_SUGGESTIVE = re.compile(
    r"program|command|cmd|helper|hook|path|file|editor|pager|textconv|driver|proxy|askpass"
    r"|browser|tool|exec|external|process|clean|smudge|fsmonitor|dir|template|target|socket"
    r"|uploadpack|receivepack|signingkey|sslca|sslcert|sslkey|cookie|mailmap|skiplist"
    r"|worktree|vcs|blob|server|include"
)
# Read by git only from system, global or command-line config: the sandbox gives git no
# system or global config, and the classifier asks before `git -c`.
_PROTECTED_ONLY = {
    "safe.directory",
    "trace2.eventtarget",
    "trace2.normaltarget",
    "trace2.perftarget",
}
# Fixed names that no single value can pin (`-c include.path=` adds an include, it does
# not take one back; any repository may need its own worktree): the sanitised copy
# leaves them out, an approved command reads them.
_UNPINNABLE = {"include.path", "core.worktree"}
# Suggestive names judged not to name a program or a file git would run or read as
# config, with the reason.
_JUDGED = {
    "TLS material, read only to talk to a server (the sandbox has no network)": {
        "http.sslcainfo",
        "http.sslcapath",
        "http.sslcert",
        "http.sslkey",
        "http.proxysslcainfo",
        "http.proxysslcert",
        "http.proxysslkey",
        "sendemail.smtpsslcertpath",
    },
    "a signing key, used only by the signing programs, which are pinned": {"user.signingkey"},
    "where `git help --web` finds pages; its browser is pinned": {"help.htmlpath"},
    "a name, not a path: a Perl DBI driver, a branch name template, server options": {
        "gitcvs.dbdriver",
        "gui.newbranchtemplate",
        "sendemail.smtpserveroption",
        "sendemail.smtpserverport",
    },
}
_JUDGED_KEYS = set().union(*_JUDGED.values())
# Switches, numbers and enumerations whose names only happen to hold a suggestive word.
_SWITCHES = re.compile(
    r"advice\..*|color\..*|column\..*|fsck\..*|receive\.fsck\..*|mergetool\..*|difftool\.prompt"
    r"|difftool\.trustexitcode|uploadpack\.(allow.*|hiderefs|keepalive)|uploadpackfilter\..*"
    r"|trace2\.maxfiles|.*\.updateserverinfo|clean\.requireforce|commit\.cleanup"
    r"|commitgraph\.readchangedpaths|completion\.commands|core\.(bigfilethreshold|filemode"
    r"|filesreflocktimeout|fsmonitorhookversion|fsyncobjectfiles|hidedotfiles|quotepath)"
    r"|credential\.usehttppath|diff\.dirstat|extensions\.worktreeconfig|feature\.manyfiles"
    r"|format\.filenamemaxlength|fsmonitor\.allowremote|gc\.worktreepruneexpire"
    r"|http\.(followredirects|proxyauthmethod|sslcertpasswordprotected|proxysslcertpasswordprotected"
    r"|schannelusesslcainfo)|log\.mailmap|merge\.directoryrenames|push\.useforceifincludes"
    r"|rebase\.(abbreviatecommands|reschedulefailedexec)|sendemail\.aliasfiletype"
    r"|sparse\.expectfilesoutsideofpatterns|stash\.showincludeuntracked"
    r"|status\.(relativepaths|showuntrackedfiles)|worktree\.guessremote"
)


def documented_keys() -> list[str]:
    done = subprocess.run(
        ["git", "help", "--config"], capture_output=True, text=True, check=True, timeout=30
    )
    keys = [line.strip() for line in done.stdout.splitlines() if re.fullmatch(r"\S+\.\S+", line)]
    assert len(keys) > 500, done.stdout[:500]  # git 2.39 documents ~850
    return keys


def test_every_documented_program_or_file_key_is_pinned_or_left_out() -> None:
    pins = {key.lower() for key in PINS}
    unhandled = []
    for key in documented_keys():
        lowered = key.lower()
        if not _SUGGESTIVE.search(lowered) or _SWITCHES.fullmatch(lowered):
            continue
        if lowered in _JUDGED_KEYS or lowered in _PROTECTED_ONLY:
            continue
        if kept(key):
            unhandled.append(f"{key}: kept by the sanitised copy")
        elif "<" not in key and "*" not in key and lowered not in pins | _UNPINNABLE:
            unhandled.append(f"{key}: a fixed name, not pinned")
    assert not unhandled, "\n".join(unhandled)


@pytest.mark.parametrize(
    "key",
    [
        "diff.x.textconv",
        "diff.x.command",
        "filter.x.clean",
        "filter.x.smudge",
        "filter.x.process",
        "merge.x.driver",
        "include.path",
        "includeIf.gitdir:/w/.path",
        "includeif.onbranch:main.path",
        "core.attributesFile",
        "core.worktree",
        "core.hooksPath",
        "core.fsmonitor",
        "core.sshCommand",
        "credential.https://x.helper",
        "remote.origin.uploadpack",
        "remote.origin.receivepack",
        "remote.origin.vcs",
        "remote.origin.proxy",
        "url.ext::sh -c x.insteadOf",
        "alias.log",
        "pager.log",
        "extensions.worktreeConfig",
        "submodule.x.update",
        "http.https://x.proxy",
        "i18n.logOutputEncoding",
    ],
)
def test_the_sanitised_copy_leaves_out(key: str) -> None:
    assert not kept(key)


def test_kept_keys_name_no_program_or_file() -> None:
    for key in KEEP:
        if key.endswith("url"):
            continue  # URLs, kept without credentials; fetching asks
        assert not _SUGGESTIVE.search(key) or _SWITCHES.fullmatch(key), key


def test_every_pin_is_in_the_environment() -> None:
    env = pin_env()
    pinned = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(len(PINS))}
    assert pinned == PINS
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert env["GIT_CONFIG_NOSYSTEM"] == "1"


HOSTILE = """
[core]
\trepositoryformatversion = 0
\tbare = false
\tattributesFile = /w/n.attr
\tfsmonitor = /w/canary
[diff "x"]
\ttextconv = /w/canary
[filter "x"]
\tclean = /w/canary
[include]
\tpath = /w/more.cfg
[includeIf "gitdir:/w/"]
\tpath = /w/more.cfg
[remote "Origin \\"two\\""]
\turl = https://bob:s3cret@git.example/r.git
\tuploadpack = /w/canary
\tfetch = +refs/heads/*:refs/remotes/origin/*
[branch "main"]
\tremote = origin
\tmerge = refs/heads/main
[user]
\tname = "A \\\\ B\\tC"
[core]
\tbare
"""


def _listed(text: str) -> list[str]:
    done = subprocess.run(
        ["git", "config", "--file", "-", "--no-includes", "--list"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        env={"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/"},
    )
    return done.stdout.splitlines()


def test_the_sanitised_copy_keeps_what_reading_needs_and_nothing_else() -> None:
    copy = sanitise(HOSTILE)
    assert _listed(copy) == [
        "core.repositoryformatversion=0",
        "core.bare=false",
        'remote.Origin "two".url=https://git.example/r.git',
        'remote.Origin "two".fetch=+refs/heads/*:refs/remotes/origin/*',
        "branch.main.remote=origin",
        "branch.main.merge=refs/heads/main",
        "user.name=A \\ B\tC",
        "core.bare=true",
    ]
    assert "canary" not in copy
    assert "s3cret" not in copy


@pytest.mark.parametrize(
    "text", ["", "not a config", "[core\n", "\x00\x01", '[a]\nb = "unterminated\n']
)
def test_a_config_git_cannot_parse_gives_an_empty_copy(text: str) -> None:
    assert _listed(sanitise(text)) == []
