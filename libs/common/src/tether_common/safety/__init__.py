"""Tether's hard safety primitives: the only code that decides what a shell command,
a file path or a URL may do. The brain uses them to explain and gate a tool call, and
the tools-runner re-checks with them before acting, so a direct call cannot skip them.

    shell.classify(command)          -> ShellVerdict (allow / ask / deny, never raises)
    paths.resolve(root, path, write) -> real Path inside the workspace, or PathDenied
    urls.check(url, resolver=...)    -> None, or BlockedDestination
    urls.check_address(ip)           -> None, or BlockedDestination (connect-time re-check)
    urls.PrivateHosts                -> the non-public hosts a deployment allows (never metadata)
    pinning.pin(url, resolve, check) -> the URL pinned to its checked address (DNS rebinding)
    beneath.open_beneath(fd, parts)  -> an fd opened beneath the root, race-free (no symlink
                                        followed); what the runner's file tools act through

Owns: the read-only allow-list, the destructive deny-list, protected names, blocked
address ranges. Never does: I/O beyond `realpath`/`stat`, DNS look-ups and the
fd-relative opens and renames of `beneath` (asked for by its caller), policy modes or
grants (the brain's gates), running anything.
"""

from .paths import check_root, resolve
from .protected import protected_component, protected_name
from .shell import classify
from .shell_verdict import Category, Danger, Decision, ShellVerdict
from .urls import Resolver, check, check_address, system_resolver

__all__ = [
    "Category",
    "Danger",
    "Decision",
    "Resolver",
    "ShellVerdict",
    "check",
    "check_address",
    "check_root",
    "classify",
    "protected_component",
    "protected_name",
    "resolve",
    "system_resolver",
]
