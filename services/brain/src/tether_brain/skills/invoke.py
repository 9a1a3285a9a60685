"""Skills in a turn: `/name` injection, the index in the system prompt, and the
`load_skill` tool whose result is kept for one turn only."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether_brain.skills.model import Skill
from tether_common.messages.gateway import CallRecord, ChatMessage, OfferedToolSpec
from tether_common.messages.tools import ToolDescriptor, ToolResult
from tether_common.skills import INVOKE_CHAR_CAP, MAX_NAME_CHARS

MAX_INVOKED = 3
ONLY_SKILL_PROMPT = "Follow the skill."
LOAD_SKILL = "load_skill"
FORGOTTEN = "(skill {name} was loaded for an earlier turn; call load_skill again to reread it)"
INDEX_HEADER = "Skills (call load_skill with a name to read one before following it):"
INJECTED_HEADER = "The user invoked these skills for this turn; follow them."

# `/name` at the start or after whitespace, ending at whitespace, punctuation or the end;
# one following blank is taken with it so removing the token leaves no double space.
# `/usr/bin` never matches (a `/` follows), and only stored names are acted on.
_SLASH = re.compile(r"(?<!\S)/([a-z0-9]+(?:-[a-z0-9]+)*)(?=$|\s|[.,;:!?)\]])[ \t]?")


@dataclass(frozen=True, slots=True)
class Invocation:
    """A prompt with its `/name` tokens taken out, and the skills they named."""

    prompt: str
    skills: tuple[Skill, ...] = ()
    skipped: tuple[str, ...] = ()  # stored names past the cap, left in the text

    def truncated(self) -> list[str]:
        return [s.name for s in self.skills if len(s.body) > INVOKE_CHAR_CAP]

    def message(self) -> ChatMessage | None:
        """The system message carrying the invoked bodies, for this turn's requests."""
        if not self.skills:
            return None
        parts = [INJECTED_HEADER, *(_injected_text(s) for s in self.skills)]
        return ChatMessage(role="system", content="\n\n".join(parts))

    def events(self) -> list[dict[str, Any]]:
        """The data of one `skill.used` event per injected skill."""
        cut = set(self.truncated())
        return [{"name": s.name, "via": "slash", "truncated": s.name in cut} for s in self.skills]


def invoke(prompt: str, skills: Mapping[str, Skill]) -> Invocation:
    """Find `/name` tokens of stored skills (at most `MAX_INVOKED` distinct ones) and
    remove them from the prompt; a prompt that was only tokens becomes `ONLY_SKILL_PROMPT`."""
    chosen: list[Skill] = []
    skipped: list[str] = []

    def take(match: re.Match[str]) -> str:
        skill = skills.get(match[1])
        if skill is None:
            return match[0]
        if skill in chosen:
            return ""
        if len(chosen) >= MAX_INVOKED:
            skipped.append(skill.name)
            return match[0]
        chosen.append(skill)
        return ""

    cleaned = _SLASH.sub(take, prompt)
    if not chosen:
        return Invocation(prompt=prompt)
    return Invocation(
        prompt=cleaned.strip() or ONLY_SKILL_PROMPT, skills=tuple(chosen), skipped=tuple(skipped)
    )


def _injected_text(skill: Skill) -> str:
    body = skill.body
    if len(body) > INVOKE_CHAR_CAP:
        body = body[:INVOKE_CHAR_CAP] + (
            f"\n[cut at {INVOKE_CHAR_CAP:,} characters; "
            f'load_skill {{"name": "{skill.name}"}} returns the whole skill]'
        )
    return f"## Skill: {skill.name}\n{body}"


def skill_index(skills: Iterable[Skill]) -> str:
    """The system prompt's part about skills: one line each, never a body ('' if none)."""
    lines = [s.index_line() for s in sorted(skills, key=lambda s: s.name)]
    return "\n".join([INDEX_HEADER, *lines]) if lines else ""


def load_skill_spec(names: Sequence[str]) -> OfferedToolSpec:
    """`load_skill` as offered to the model; the names are an enum so a wrong one fails
    the schema gate with the valid names listed."""
    return OfferedToolSpec(name=LOAD_SKILL, description=_DESCRIPTION, parameters=_schema(names))


def load_skill_descriptor(names: Sequence[str] | None) -> ToolDescriptor:
    """`load_skill` for the gates: a read of the brain's own data, safe to repeat. With
    `names` None the name is any skill name: the descriptor is shared by every run, and
    which skills a run may load depends on its tenant (checked by `load_skill`)."""
    return ToolDescriptor(
        name=LOAD_SKILL,
        description=_DESCRIPTION,
        parameters=_schema(names),
        scope="read",
        reach="self",
        effect="read",
        idempotent=True,
    )


_DESCRIPTION = (
    "Read one skill's full instructions by name (the names are listed under Skills in the "
    "system prompt). The text is available for this turn only."
)


def _schema(names: Sequence[str] | None) -> dict[str, Any]:
    name: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS}
    if names is not None:
        name = {"type": "string", "enum": sorted(names)}
    return {
        "type": "object",
        "properties": {"name": name},
        "required": ["name"],
        "additionalProperties": False,
    }


def load_skill(skills: Mapping[str, Skill], call: CallRecord) -> ToolResult:
    """Run a `load_skill` call: the whole body, or a failed result naming the skills."""
    name = call.arguments.get("name")
    skill = skills.get(name) if isinstance(name, str) else None
    if skill is None:
        valid = ", ".join(sorted(skills)) or "(none)"
        return ToolResult(
            call_id=call.id,
            name=LOAD_SKILL,
            ok=False,
            content=f"FAILED: unknown_skill: no skill {name!r}. Skills: {valid}.",
            error_code="unknown_skill",
        )
    content = f"# Skill: {skill.name}\n{skill.body}"
    return ToolResult(call_id=call.id, name=LOAD_SKILL, ok=True, content=content)


def forget_loaded_skills(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """History for a request: `load_skill` results before the latest user message are
    replaced by a one-line note, so a loaded body lasts one turn only."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    out = []
    for index, message in enumerate(messages):
        if index < last_user and message.role == "tool" and message.name == LOAD_SKILL:
            skill = _loaded_name(messages, message.tool_call_id)
            message = message.model_copy(update={"content": FORGOTTEN.format(name=skill)})
        out.append(message)
    return out


def _loaded_name(messages: Sequence[ChatMessage], call_id: str | None) -> str:
    for message in messages:
        for call in message.tool_calls:
            if call.id == call_id and isinstance(call.arguments.get("name"), str):
                return str(call.arguments["name"])
    return "?"
