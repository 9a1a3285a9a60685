"""Names that are secret wherever they appear (credential dotfiles, keys, VCS internals),
and config files that programs read by themselves and that can make them run code.

Shared by the path guard (refused for reads and writes alike) and the shell classifier
(a read-only command that names one must ask). Matching is case-insensitive because
macOS and Windows file systems are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_EXACT = frozenset(
    {
        ".env",
        ".envrc",
        ".git",
        ".ssh",
        ".gnupg",
        ".aws",
        ".azure",
        ".kube",
        ".netrc",
        "_netrc",
        ".npmrc",
        ".pypirc",
        ".git-credentials",
        ".gitcookies",
        ".htpasswd",
        ".pgpass",
        ".my.cnf",
        ".boto",
        ".s3cfg",
        ".vault-token",
        ".dockercfg",
        ".terraformrc",
        ".bash_history",
        ".zsh_history",
        "authorized_keys",
        # Read by git on its own: a driver, pager or hook named here runs on `git diff`.
        ".gitconfig",
        ".gitattributes",
        ".hg",
        # Read by shells and pagers when the workspace is someone's home directory.
        ".bashrc",
        ".bash_profile",
        ".bash_login",
        ".bash_logout",
        ".profile",
        ".zshrc",
        ".zshenv",
        ".zprofile",
        ".zlogin",
        ".lesskey",
        ".curlrc",
        ".wgetrc",
    }
)

_PATTERNS = re.compile(
    r"""
    \.env\..*                                   # .env.local, .env.production ...
  | id_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?(?:\.pub)?
  | .*\.(?:pem|key|p12|pfx|jks|keystore|kdbx|ppk|tfstate|tfstate\.backup)
  | (?:credentials|client_secret|service[-_]account).*\.json
    """,
    re.VERBOSE,
)

# Directory + file pairs that are secret only together (the rest of the folder is not).
_PAIRS = frozenset(
    {(".docker", "config.json"), (".config", "gcloud"), (".config", "gh"), (".config", "git")}
)

# Names a shell glob such as `.e*` or `*.pem` could expand to; matched by `_glob_regex`.
_GLOB_PROBES = (
    *sorted(_EXACT),
    *(second for _, second in sorted(_PAIRS)),
    ".env.local",
    "x.pem",
    "x.key",
    "x.p12",
    "x.pfx",
    "id_rsa",
    "credentials.json",
)
_PAIR_FIRSTS = frozenset(first for first, _ in _PAIRS)
_GROUP_OPEN = re.compile(r"[?*+@!]\(")
_MAX_PATTERN = 1024


def protected_name(name: str) -> bool:
    """True when one path component is secret by itself."""
    # Windows-backed volumes ignore trailing dots and spaces: `.git.` is `.git` there.
    lowered = name.lower().rstrip(" .")
    return lowered in _EXACT or _PATTERNS.fullmatch(lowered) is not None


def protected_component(parts: Sequence[str]) -> str | None:
    """The first secret component (or pair, joined by `/`) in `parts`, else None."""
    lowered = [part.lower() for part in parts]
    for index, part in enumerate(lowered):
        if protected_name(part):
            return parts[index]
        if index and (lowered[index - 1], part) in _PAIRS:
            return f"{parts[index - 1]}/{parts[index]}"
    return None


def glob_may_match_protected(pattern: str) -> bool:
    """True when an unquoted shell word with a glob could expand to a secret name at
    any of its path components, in every glob form bash has: `?`, `*`, `[...]`, the
    extglob groups `?(..)` `*(..)` `+(..)` `@(..)` `!(..)`, and brace lists and ranges
    (`{a,b}`, `{a..z}`), which bash expands before globbing.

    Judged per component against representative secret names, so `.gi?/config`,
    `.git/conf*` and `{.git,x}/config` ask. The shell expands a component to dotfiles
    only when it starts with a dot; a component that is only `*` and `?` is let through
    on purpose: `ls *` and `cat */*.py` are how people look at a folder.
    """
    if len(pattern) > _MAX_PATTERN:
        return True
    components = [part.lower() for part in pattern.split("/") if part not in ("", ".", "..")]
    if protected_component(components) is not None:
        return True  # a literal secret name beside the glob: `.git/conf*`
    matchers = [_component_matcher(part) for part in components]
    for index, matcher in enumerate(matchers):
        if matcher is None:
            continue  # a bare `*`
        if any(matcher.fullmatch(probe) for probe in _probes(components[index])):
            return True
        before = matchers[index - 1] if index else None
        if before is not None and any(
            before.fullmatch(first) and matcher.fullmatch(second) for first, second in _PAIRS
        ):
            return True
    return False


def _probes(component: str) -> list[str]:
    # A leading dot must be matched by a literal dot; a group or a bracket at the start
    # may hold one, so both kinds of name are tried there.
    if component.startswith("."):
        return [probe for probe in _GLOB_PROBES if probe.startswith(".")]
    if component.startswith(("[", "{")) or _GROUP_OPEN.match(component):
        return list(_GLOB_PROBES)
    return [probe for probe in _GLOB_PROBES if not probe.startswith(".")]


def _component_matcher(component: str) -> re.Pattern[str] | None:
    """A regex that matches at least every name `component` can expand to; None for a
    component made only of `*` and `?`."""
    if set(component) <= {"*", "?"}:
        return None
    out: list[str] = []
    index = 0
    while index < len(component):
        char = component[index]
        nxt = component[index + 1] if index + 1 < len(component) else ""
        if char in "?*+@!" and nxt == "(":
            out.append(".*")  # an extglob group: anything, to stay on the safe side
            index = _closing(component, index + 1, "(", ")")
        elif char == "{":
            out.append(".*")  # a brace list or range bash expands before globbing
            index = _closing(component, index, "{", "}")
        elif char == "[":
            end = component.find("]", index + 2)
            if end < 0:
                out.append(re.escape(char))
            else:
                out.append(".")
                index = end
        elif char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "\\" and nxt:
            out.append(re.escape(nxt))
            index += 1
        else:
            out.append(re.escape(char))
        index += 1
    return re.compile("".join(out), re.DOTALL)


def _closing(text: str, start: int, opening: str, closing: str) -> int:
    """The index of the bracket closing the one at `start` (the end when none does)."""
    depth = 0
    for index in range(start, len(text)):
        if text[index] == opening:
            depth += 1
        elif text[index] == closing:
            depth -= 1
            if depth == 0:
                return index
    return len(text)
