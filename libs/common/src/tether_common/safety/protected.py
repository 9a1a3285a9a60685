"""Names that are secret wherever they appear (credential dotfiles, keys, VCS internals),
and config files that programs read by themselves and that can make them run code.

Shared by the path guard (refused for reads and writes alike) and the shell classifier
(a read-only command that names one must ask). Matching is case-insensitive because
macOS and Windows file systems are.
"""

from __future__ import annotations

import fnmatch
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

# Names a shell glob such as `.e*` or `*.pem` could expand to; checked with fnmatch.
_GLOB_PROBES = (*sorted(_EXACT), ".env.local", "x.pem", "x.key", "x.p12", "x.pfx", "id_rsa")


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
    """True when an unquoted shell glob could expand to a secret name.

    Only the last component is tested, against representative secret names. The shell
    expands a glob to dotfiles only when it starts with a dot, and a bare `*` is let
    through on purpose: it is how people list a folder.
    """
    last = pattern.rstrip("/").rsplit("/", 1)[-1].lower()
    if not last or set(last) <= {"*", "?"}:
        return False
    dotted = last.startswith(".")
    probes = [probe for probe in _GLOB_PROBES if probe.startswith(".") == dotted]
    return any(fnmatch.fnmatchcase(probe, last) for probe in probes)
