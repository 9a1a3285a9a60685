"""Names models use for our tools and their arguments, and how a raw name finds its tool.

Models trained on other agents' tools call `read_file`, `bash` or `google`; an alias maps
such a name onto the tool we actually offer. An alias never invents a tool: it only
resolves when its target is offered.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Final

from tether_common.toolcalls.model import OfferedTool

__all__ = ["DEFAULT_ALIASES", "KEY_SYNONYMS", "NameResolver", "normalize_key", "normalize_name"]


def _table(groups: Mapping[str, Iterable[str]]) -> Mapping[str, str]:
    return MappingProxyType({alias: target for target, names in groups.items() for alias in names})


DEFAULT_ALIASES: Final[Mapping[str, str]] = _table(
    {
        "file_read": ("read_file", "readfile", "cat", "open_file", "view_file"),
        "file_write": ("write_file", "writefile", "create_file", "save_file"),
        "file_list": ("list_files", "listfiles", "ls", "list_dir", "list_directory"),
        "file_search": ("search_files", "grep", "find_in_files", "search_file", "rg"),
        "file_edit": ("edit_file", "editfile", "str_replace", "replace_in_file"),
        "shell": (
            *("bash", "sh", "zsh", "run_command", "execute_command", "terminal"),
            *("run_shell", "shell_command", "exec", "execute"),
        ),
        "web_search": ("google", "search", "websearch", "search_web", "brave_search", "bing"),
        "web_fetch": ("fetch", "browse", "get_url", "fetch_url", "open_url", "http_get"),
        "current_time": ("time", "get_time", "get_current_time", "datetime"),
        "convert_time": ("time_convert", "timezone_convert", "convert_timezone"),
        "calculate": ("calculator", "calc", "math", "evaluate", "compute", "wolfram_alpha"),
        "load_skill": ("use_skill", "get_skill"),
        "run_agent": ("spawn_agent", "subagent", "delegate"),
    }
)

# Argument-key synonyms: used only when the target key is in the schema and the synonym
# is not, so a tool with a real `file` parameter keeps it.
KEY_SYNONYMS: Final[Mapping[str, str]] = _table(
    {
        "path": (
            *("file", "filename", "file_name", "file_path", "filepath", "fname"),
            *("dir", "directory", "folder", "dirname", "dir_path"),
        ),
        "command": ("cmd", "command_line", "commandline", "script", "shell_command"),
        "query": ("q", "search", "search_query", "query_string", "search_term", "keywords"),
        "timezone": ("tz", "zone", "time_zone", "timezone_name", "iana"),
        "expression": ("expr", "formula", "equation", "math", "calculation", "input"),
        "url": ("uri", "link", "href", "address", "website"),
        "content": ("contents", "text", "data", "body", "file_content"),
        "count": ("n", "num", "num_results", "max_results", "number"),
        "timeout": ("timeout_seconds", "timeout_s", "timeout_sec", "time_limit"),
        "recursive": ("recurse", "recursively"),
        "pattern": ("regex", "regexp", "search_pattern"),
        "exclude": ("excludes", "ignore", "exclusions", "exclude_patterns"),
    }
)

# How alike a raw name must be to one offered tool's name (difflib's ratio) to be read as
# it: "calculator" → "calculate" (0.84), "file_reader" → "file_read" (0.9). Only when
# exactly one tool is that close; "file" (close to nothing) stays unknown.
NEAR_NAME_RATIO: Final = 0.8
_SEPARATORS: Final = re.compile(r"[\s\-]+")
_CAMEL: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Prefixes some chat templates put before a tool name (`functions.shell`).
_PREFIXES: Final = ("functions.", "function.", "tools.", "tool.", "default_api.")


def normalize_name(raw: str) -> str:
    """Lower-case, `-`/space → `_`, template prefixes and Llama's `.call` suffix removed."""
    name = _SEPARATORS.sub("_", raw.strip().strip("`'\"").strip().lower())
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.removesuffix(".call")


def normalize_key(raw: str) -> str:
    """An argument key in snake case: `filePath` → `file_path`, `time-zone` → `time_zone`."""
    return _SEPARATORS.sub("_", _CAMEL.sub("_", raw.strip())).lower()


class NameResolver:
    """Finds the offered tool a raw name means: exact, the tool's aliases, the table, squashed.

    Its lookup tables depend only on the offered names, their own aliases and the alias
    table, and are built once per such set (`_tables`): the gateway fits every call it
    passes on against the same few tool sets, and rebuilding them for each call cost it
    ~50 µs a step (7% of its CPU per step; 19% of its profile)."""

    __slots__ = ("_aliases", "_exact", "_squashed")

    def __init__(self, tools: Sequence[OfferedTool], aliases: Mapping[str, str] | None) -> None:
        offer = tuple((tool.name, _own_aliases(tool)) for tool in tools)
        self._exact, self._squashed, self._aliases = _tables(
            offer, tuple(aliases.items()) if aliases else ()
        )

    def resolve(self, raw: str) -> str | None:
        name = normalize_name(raw)
        found = self._exact.get(name) or self._aliases.get(name)
        return found or self._squashed.get(name.replace("_", "")) or self._near(name)

    def _near(self, name: str) -> str | None:
        """The one offered tool whose name is nearly `name` (a typo, a suffix), or None."""
        if len(name) < 4:
            return None
        close = difflib.get_close_matches(name, self._exact, n=2, cutoff=NEAR_NAME_RATIO)
        return self._exact[close[0]] if len(close) == 1 else None


_Offer = tuple[tuple[str, tuple[str, ...]], ...]
_Table = Mapping[str, str]


@functools.lru_cache(maxsize=256)
def _tables(offer: _Offer, extra: tuple[tuple[str, str], ...]) -> tuple[_Table, _Table, _Table]:
    """(exact, squashed, aliases) for the offered (name, own aliases) and the extra alias
    table; read-only, as they are shared by every resolver of that offer."""
    exact: dict[str, str] = {}
    squashed: dict[str, str] = {}
    for name, _ in offer:
        exact.setdefault(normalize_name(name), name)
        squashed.setdefault(normalize_name(name).replace("_", ""), name)
    found: dict[str, str] = {}
    for name, own in offer:
        for alias in own:
            found.setdefault(normalize_name(alias), name)
    for alias, target in _normalized_table(dict(extra) if extra else None):
        offered = exact.get(target)
        if offered is not None:
            found.setdefault(alias, offered)
    return MappingProxyType(exact), MappingProxyType(squashed), MappingProxyType(found)


def _normalize_pairs(table: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((normalize_name(alias), normalize_name(target)) for alias, target in table.items())


# The default table normalized once: a resolver is built for every call fitted (the
# gateway fits each call it passes on), and normalizing the table each time was a third
# of the gateway's CPU per step.
_DEFAULT_PAIRS: Final = _normalize_pairs(DEFAULT_ALIASES)


def _normalized_table(aliases: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    """(alias, target) normalized, the defaults overridden by `aliases`, in table order."""
    if not aliases:
        return _DEFAULT_PAIRS
    return _normalize_pairs({**DEFAULT_ALIASES, **aliases})


def _own_aliases(tool: OfferedTool) -> tuple[str, ...]:
    if not _may_have_aliases(type(tool)):
        return ()
    aliases = getattr(tool, "aliases", ())
    if isinstance(aliases, str) or not isinstance(aliases, Iterable):
        return ()
    return tuple(alias for alias in aliases if isinstance(alias, str))


@functools.cache
def _may_have_aliases(kind: type) -> bool:
    """False for a pydantic model type with no `aliases` field, property or extras (the
    gateway's `OfferedToolSpec`): asking one for a missing attribute goes through its
    `__getattr__` and an AttributeError, several microseconds a tool on every call fitted.
    Any other type may hold `aliases` on the instance, and is asked."""
    fields = getattr(kind, "__pydantic_fields__", None)
    if not isinstance(fields, Mapping):
        return True
    config = getattr(kind, "model_config", {})
    return "aliases" in fields or hasattr(kind, "aliases") or config.get("extra") == "allow"
