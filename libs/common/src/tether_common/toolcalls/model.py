"""The parser's value types: what a caller offers (`OfferedTool`) and what comes back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class OfferedTool(Protocol):
    """A tool the model may call; pydantic models with these attributes fit too.

    `parameters` is a strict JSON Schema object. An optional `aliases: Sequence[str]` and
    `description: str` are read with `getattr`, so they are not part of the Protocol.
    """

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A plain `OfferedTool` for tests and callers that have no richer tool model."""

    name: str
    parameters: Mapping[str, Any]
    aliases: Sequence[str] = ()
    description: str = ""


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """One usable call: the offered tool's own name, arguments coerced to its schema.

    `repairs` says, in words for the step's record, what was changed to get there beyond
    syntax (a name read as another tool's, a key renamed or dropped, a missing name
    inferred from the argument keys); empty when the call was written as it stands.
    """

    name: str
    args: dict[str, Any]
    repairs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ParseResult:
    """Everything one model output yielded.

    `retry` is True when a call marker was seen but no usable call came out; `problems`
    then says why, in words fit for a corrective message to the model.
    """

    calls: tuple[ParsedCall, ...]
    retry: bool
    text: str
    reasoning: str
    problems: tuple[str, ...] = field(default=())
