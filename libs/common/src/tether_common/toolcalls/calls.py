"""Turns parsed values (a call object, a list of them, or a name plus arguments) into calls.

`explicit` says whether the value sat behind a call marker. Behind a marker every defect is
a problem the model is told about; a bare value that does not clearly name an offered tool
is ordinary data and yields nothing at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tether_common.toolcalls.aliases import NameResolver, normalize_name
from tether_common.toolcalls.coerce import coerce_args, coerce_args_noted
from tether_common.toolcalls.model import OfferedTool, ParsedCall
from tether_common.toolcalls.repair import read_json

__all__ = [
    "ARG_KEYS",
    "NAME_KEYS",
    "Catalog",
    "Outcome",
    "call_from_parts",
    "calls_from_value",
    "nameless_call",
    "problem",
]

NAME_KEYS: Final = ("name", "tool", "tool_name", "function", "action", "function_name")
ARG_KEYS: Final = (
    *("args", "arguments", "parameters", "params", "input", "action_input"),
    *("tool_input", "kwargs"),
)
# Envelope fields that say nothing about the call itself (OpenAI ids, indexes).
_ENVELOPE: Final = frozenset({"id", "type", "call_id", "tool_call_id", "index"})


@dataclass(frozen=True, slots=True)
class Outcome:
    """Calls found and problems met in one block."""

    calls: tuple[ParsedCall, ...] = ()
    problems: tuple[str, ...] = ()

    @staticmethod
    def combine(outcomes: Iterable[Outcome]) -> Outcome:
        found = list(outcomes)
        return Outcome(
            calls=tuple(call for outcome in found for call in outcome.calls),
            problems=tuple(problem for outcome in found for problem in outcome.problems),
        )


def problem(text: str) -> Outcome:
    return Outcome(problems=(text,))


class Catalog:
    """The offered tools of one parse, looked up by any name a model may use."""

    def __init__(self, tools: Sequence[OfferedTool], aliases: Mapping[str, str] | None) -> None:
        self._tools: dict[str, OfferedTool] = {}
        for tool in tools:
            self._tools.setdefault(tool.name, tool)
        self._resolver = NameResolver(tools, aliases)

    def resolve(self, raw_name: str) -> OfferedTool | None:
        name = self._resolver.resolve(raw_name)
        return None if name is None else self._tools.get(name)

    def unknown(self, raw_name: str) -> str:
        if not self._tools:
            return f"unknown tool {raw_name.strip()!r}: no tools are offered right now"
        return f"unknown tool {raw_name.strip()!r}; the tools are: {', '.join(self._tools)}"

    def fitting(self, args: Mapping[str, object]) -> list[OfferedTool]:
        """The tools whose parameters take every key of `args` (synonyms applied) and
        whose required parameters are all among them."""
        return [tool for tool in self._tools.values() if _fits(tool, args)]


def _fits(tool: OfferedTool, args: Mapping[str, object]) -> bool:
    props = tool.parameters.get("properties")
    if not isinstance(props, Mapping) or not args:
        return False
    kept, notes = coerce_args_noted(args, tool.parameters)
    if any(note.startswith("unknown") for note in notes) or len(kept) != len(args):
        return False
    required = tool.parameters.get("required")
    return all(key in kept for key in required) if isinstance(required, list) else True


def calls_from_value(value: object, catalog: Catalog, *, explicit: bool) -> Outcome:
    """The calls in a parsed JSON value: one object, or a list of them."""
    if isinstance(value, list):
        return Outcome.combine(calls_from_value(item, catalog, explicit=explicit) for item in value)
    if not isinstance(value, dict):
        return problem("a tool call must be a JSON object") if explicit else Outcome()
    return _from_object(value, catalog, explicit=explicit)


def call_from_parts(
    raw_name: str, raw_args: object, catalog: Catalog, *, positional: Sequence[object] = ()
) -> Outcome:
    """A call given as a name and arguments (tags, Python-style calls): always explicit."""
    tool = catalog.resolve(raw_name)
    if tool is None:
        return problem(catalog.unknown(raw_name))
    return _build(tool, raw_args, positional, _name_repairs(raw_name, tool))


def nameless_call(value: object, catalog: Catalog) -> Outcome:
    """A call written as its arguments alone (`{"expression": "2+2"}`, or under an
    `args` key), when those keys fit exactly one offered tool; else nothing. The caller
    decides where a bare object may be read so (behind a marker, or as a whole reply)."""
    named = isinstance(value, dict) and any(
        isinstance(value.get(key), str) and value[key].strip() for key in NAME_KEYS
    )
    if not isinstance(value, dict) or named:
        return Outcome()
    args = _bare_args(value)
    fitting = catalog.fitting(args)
    if len(fitting) != 1:
        return Outcome()
    tool = fitting[0]
    keys = ", ".join(sorted(args))
    note = f"no tool name: the arguments ({keys}) fit only {tool.name!r}"
    return _build(tool, args, (), (note,))


def _name_repairs(raw_name: str, tool: OfferedTool) -> tuple[str, ...]:
    if normalize_name(raw_name) == normalize_name(tool.name):
        return ()
    return (f"tool name {raw_name.strip()!r} read as {tool.name!r}",)


def _from_object(obj: dict[str, object], catalog: Catalog, *, explicit: bool) -> Outcome:
    wrapped = obj.get("tool_calls")
    if isinstance(wrapped, list):  # a whole assistant message, OpenAI style
        return calls_from_value(wrapped, catalog, explicit=explicit)
    function = obj.get("function")
    if isinstance(function, dict):  # {"type": "function", "function": {"name", "arguments"}}
        return _from_object(function, catalog, explicit=explicit)
    raw_name = next((obj[key] for key in NAME_KEYS if isinstance(obj.get(key), str)), None)
    if not isinstance(raw_name, str) or not raw_name.strip():
        if not explicit:
            return Outcome()
        found = nameless_call(obj, catalog)
        if found.calls:
            return found
        fitting = catalog.fitting(_bare_args(obj))
        if len(fitting) > 1:
            names = ", ".join(repr(tool.name) for tool in fitting)
            return problem(f'a tool call needs a "name": these arguments fit {names}')
        return problem('a tool call needs a "name"')
    tool = catalog.resolve(raw_name)
    if tool is None:
        return problem(catalog.unknown(raw_name)) if explicit else Outcome()
    arg_key = next((key for key in ARG_KEYS if key in obj), None)
    extra = {k: v for k, v in obj.items() if k not in NAME_KEYS and k not in _ENVELOPE}
    if arg_key is not None:
        extra.pop(arg_key)
    if not explicit and not _plainly_a_call(tool, obj.get(arg_key) if arg_key else None, extra):
        return Outcome()
    args = obj[arg_key] if arg_key is not None else extra
    return _build(tool, args, (), _name_repairs(raw_name, tool))


def _bare_args(obj: dict[str, object]) -> dict[str, object]:
    arg_key = next((key for key in ARG_KEYS if isinstance(obj.get(key), dict)), None)
    raw = obj[arg_key] if arg_key is not None else obj
    return (
        {str(k): v for k, v in raw.items() if k not in _ENVELOPE} if isinstance(raw, dict) else {}
    )


def _plainly_a_call(tool: OfferedTool, args: object, extra: dict[str, object]) -> bool:
    """Whether a bare object that names a tool is a call rather than data about the tool.

    A call object holds a name plus arguments, or a name plus the tool's own parameters
    side by side; anything else (a description, a schema, stray fields) is data.
    """
    props = tool.parameters.get("properties")
    if not isinstance(props, Mapping):
        return False
    if args is not None:
        return not extra and not (isinstance(args, dict) and _looks_like_schema(args, props))
    if not extra:
        return not tool.parameters.get("required")
    return len(coerce_args(extra, tool.parameters)) == len(extra)


def _looks_like_schema(args: dict[str, object], props: Mapping[str, Any]) -> bool:
    return args.get("type") == "object" and "properties" in args and "properties" not in props


def _build(
    tool: OfferedTool, raw_args: object, positional: Sequence[object], repairs: tuple[str, ...]
) -> Outcome:
    args = _args_object(tool, raw_args)
    if args is None:
        return problem(
            f"the arguments of {tool.name!r} must be a JSON object with the keys "
            f"{', '.join(_properties(tool)) or '(none)'}"
        )
    free = [key for key in _properties(tool) if key not in args]
    args.update(zip(free, positional, strict=False))
    coerced, notes = coerce_args_noted(args, tool.parameters)
    return Outcome(calls=(ParsedCall(tool.name, coerced, (*repairs, *notes)),))


def _args_object(tool: OfferedTool, raw: object) -> dict[str, object] | None:
    """The arguments as an object: given, decoded from a JSON string, or one bare value."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {str(key): value for key, value in raw.items()}
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return {}
        read = read_json(text) if text.startswith("{") else None
        if read is not None and isinstance(read[0], dict):
            return {str(key): value for key, value in read[0].items()}
    if isinstance(raw, list | dict):
        return None
    sole = _sole_parameter(tool)
    return None if sole is None else {sole: raw}


def _properties(tool: OfferedTool) -> list[str]:
    props = tool.parameters.get("properties")
    return [str(key) for key in props] if isinstance(props, Mapping) else []


def _sole_parameter(tool: OfferedTool) -> str | None:
    """The parameter a bare value means: the only required one, else the only one."""
    props = _properties(tool)
    required = tool.parameters.get("required")
    if isinstance(required, list):
        wanted = [key for key in required if key in props]
        if len(wanted) == 1:
            return str(wanted[0])
    return props[0] if len(props) == 1 else None
