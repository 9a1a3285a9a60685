"""Two keys in an agent's policy: which quorum (`tether_common.messages.approvals.
QuorumRule`, the approvals service's own model) a call needs before it runs.

An agent's `quorum` maps a key to a rule. A key is a tool pattern (a glob matched against
the tool's name and each alias, case-insensitively, as the organisation's guardrails are)
or `category:<name>` (`read_files`, `write_files`, `shell`, `network`, `other`). Every key
that matches counts and the strictest rule wins (more people, then a named group). A
matching rule makes the call ask, whatever a grant or `#noapproval` says: two keys are
for the worst actions, and a waiver never removes one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from tether_common.messages.agents import CATEGORY_KEY
from tether_common.messages.approvals import QuorumRule

__all__ = ["CATEGORY_KEY", "QuorumMatch", "quorum_for"]


@dataclass(frozen=True, slots=True)
class QuorumMatch:
    """The rule a call needs, and the key of the agent's policy that set it."""

    key: str
    rule: QuorumRule

    def describe(self, tool: str) -> str:
        group = f" of the group '{self.rule.group}'" if self.rule.group else ""
        return (
            f"{tool} needs {self.rule.needed} approvers{group}, never the requester "
            f"(quorum '{self.key}')"
        )


def _hits(key: str, names: Iterable[str], category: str) -> bool:
    if key.startswith(CATEGORY_KEY):
        return key[len(CATEGORY_KEY) :] == category
    pattern = key.casefold()
    return any(fnmatchcase(name.casefold(), pattern) for name in names)


def quorum_for(
    names: Iterable[str], category: str, quorums: Mapping[str, QuorumRule]
) -> QuorumMatch | None:
    """The strictest rule among the keys matching a tool (its name and aliases, and its
    category); None when none does. Equals keep the first key."""
    found: QuorumMatch | None = None
    names = tuple(names)
    for key, rule in quorums.items():
        if not _hits(key, names, category):
            continue
        if found is None or rule.strictness() > found.rule.strictness():
            found = QuorumMatch(key, rule)
    return found
