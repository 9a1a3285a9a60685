"""The grant grammar of DESIGN §4: `{toolId}[?{constraints}][#noapproval]`.

- exact ids (`file_read`), `app.schema.*` (the read verbs of that schema only) and
  `app.schema.*:write` (read and write verbs);
- constraints `key=value` or `key=in:a,b`, joined by `&`, percent-decoded; several entries
  for one tool stay separate alternatives and are never merged;
- a wildcard with constraints is refused and grants nothing;
- `#noapproval` waives confirmation for that entry only: it widens and narrows nothing;
- `[]` (no entries) means everything discovered, default-deny for what needs a grant;
  `__none__` means deliberately tool-less.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

READ_VERBS = frozenset(
    {"get", "list", "read", "search", "query", "fetch", "describe", "count", "find"}
)
WRITE_VERBS = frozenset({"create", "update", "patch", "upsert", "delete", "write", "send", "run"})
NONE = "__none__"


@dataclass(frozen=True, slots=True)
class Constraint:
    key: str
    allowed: frozenset[str]

    def matches(self, args: Mapping[str, Any]) -> bool:
        if self.key not in args:
            return False
        value = args[self.key]
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return text in self.allowed


@dataclass(frozen=True, slots=True)
class Grant:
    """One entry; `raw` is kept for explanations and audit."""

    raw: str
    tool: str
    constraints: tuple[Constraint, ...] = ()
    noapproval: bool = False
    write: bool = False

    @property
    def wildcard(self) -> bool:
        return self.tool.endswith(".*")

    def covers(self, tool_id: str) -> bool:
        if not self.wildcard:
            return tool_id == self.tool
        prefix = self.tool[:-1]
        if not tool_id.startswith(prefix) or "." in tool_id[len(prefix) :]:
            return False
        verb = tool_id[len(prefix) :]
        return verb in READ_VERBS or (self.write and verb in WRITE_VERBS)

    def allows(self, args: Mapping[str, Any]) -> bool:
        return all(c.matches(args) for c in self.constraints)


@dataclass(frozen=True, slots=True)
class GrantSet:
    grants: tuple[Grant, ...] = ()
    tool_less: bool = False
    problems: tuple[str, ...] = field(default=())

    def for_tool(self, tool_id: str) -> list[Grant]:
        return [g for g in self.grants if g.covers(tool_id)]


def _constraint(part: str) -> Constraint:
    key, sep, value = part.partition("=")
    if not sep or not key:
        raise ValueError(f"constraint '{part}' is not key=value")
    value = unquote(value)
    if value.startswith("in:"):
        allowed = frozenset(unquote(v) for v in value[3:].split(","))
    else:
        allowed = frozenset({value})
    return Constraint(unquote(key), allowed)


def parse_grant(raw: str) -> Grant:
    """One entry, or ValueError saying what is wrong with it."""
    body, _, fragment = raw.strip().partition("#")
    if fragment not in ("", "noapproval"):
        raise ValueError(f"'{raw}': unknown flag '#{fragment}'")
    tool, _, query = body.partition("?")
    write = tool.endswith(":write")
    if write:
        tool = tool[: -len(":write")]
        if not tool.endswith(".*"):
            raise ValueError(f"'{raw}': ':write' applies only to a wildcard 'app.schema.*'")
    if not tool or any(c.isspace() for c in tool):
        raise ValueError(f"'{raw}': no tool id")
    if "*" in tool and (not tool.endswith(".*") or tool.count("*") > 1 or tool.count(".") < 2):
        raise ValueError(f"'{raw}': only 'app.schema.*' wildcards are allowed")
    constraints = tuple(_constraint(p) for p in query.split("&") if p) if query else ()
    if constraints and tool.endswith(".*"):
        raise ValueError(f"'{raw}': a wildcard cannot carry constraints; it grants nothing")
    return Grant(raw, tool, constraints, fragment == "noapproval", write)


def parse_grants(entries: Iterable[str]) -> GrantSet:
    """Parse an agent's grants; a bad entry grants nothing and is reported."""
    items = list(entries)
    if items == [NONE]:
        return GrantSet(tool_less=True)
    grants, problems = [], []
    for raw in items:
        try:
            grants.append(parse_grant(raw))
        except ValueError as exc:
            problems.append(str(exc))
    return GrantSet(tuple(grants), problems=tuple(problems))
