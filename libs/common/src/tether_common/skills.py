"""Skill files: parse a `SKILL.md`, write one, and check skills for problems.

A skill is a folder holding `SKILL.md`: a front matter block (`name`, `description` with
a "Use when …" trigger) and a body of principles. This module is pure: it reads files
it is pointed at and keeps no state, so the brain's store and the `tether skills
validate` command share one definition of a good skill. The front matter is YAML, read
with PyYAML's safe loader (so comments, lists and block scalars mean what YAML says),
minus anchors and aliases, which a skill never needs and which let a few bytes expand
into a huge document.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Literal

import yaml

from tether_common.errors import ErrorCode, MessageError
from tether_common.settings import tether_home

SKILL_FILE = "SKILL.md"
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_BODY_LINES = 500
# The front matter holds a name, a description and a few short fields; anything larger
# is refused before PyYAML reads it.
MAX_FRONT_MATTER_CHARS = 16 * 1024
# The brain injects at most this much of a body per `/name`; longer bodies are cut there.
INVOKE_CHAR_CAP = 4000
# Jaccard similarity of description words at which two skills would trigger on the
# same requests; measured on the shipped skills, which sit below 0.15.
COLLISION_THRESHOLD = 0.45
OPTIONAL_SECTIONS = ("anti-rationalization", "red flags", "evidence required")

NAME_PATTERN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_TRIGGER = re.compile(r"\buse when\b\s*\S", re.IGNORECASE)
_HEADING = re.compile(r"#{1,6}\s+(.*?)\s*#*\s*")
_EXAMPLE_HEADING = re.compile(r"(worked\s+)?examples?\b", re.IGNORECASE)
_TRANSCRIPT_LINE = re.compile(r"(user|assistant|human|ai|input|output)\s*:", re.IGNORECASE)
_REFERENCE = re.compile(r"references/[\w./-]*[\w-]")
_WORD = re.compile(r"[a-z0-9]+")
_MAX_FENCE_LINES = 12
# Words every description shares; they say nothing about when a skill applies.
_STOPWORDS = frozenset(
    _WORD.findall(
        "use when the and for with you your that this are from into about any asks user "
        "users task tasks skill need needs needed want wants what which who how its has "
        "have not but all can will should must been being was were then than them they "
        "their our out own per via also just only some such"
    )
)

Severity = Literal["error", "warning"]
# A front matter value as YAML gives it, with dates turned into ISO text.
FieldValue = str | int | float | bool | None | list["FieldValue"] | dict[str, "FieldValue"]


@dataclass(frozen=True, slots=True)
class SkillDocument:
    """One parsed `SKILL.md`: the two required fields, the body, and any other fields."""

    name: str
    description: str
    body: str
    fields: dict[str, FieldValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a skill; `skill` names the folder or skill it concerns."""

    skill: str
    code: str
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        return f"{self.skill}: {self.severity}: {self.message} [{self.code}]"


def _invalid(message: str) -> MessageError:
    return MessageError(message, code=ErrorCode.SKILL_INVALID)


def user_skills() -> Path:
    """Where new skills are written: `$TETHER_HOME/skills` (default `~/.tether/skills`),
    beside the rest of `tether up`'s data. The shipped `skills/` folder is read after it,
    as read-only defaults."""
    return tether_home() / "skills"


def check_name(name: str) -> None:
    """Refuse a name that is not lower-case words joined by hyphens (this also keeps
    names usable as folder names: no `/`, no `..`)."""
    if len(name) > MAX_NAME_CHARS or NAME_PATTERN.fullmatch(name) is None:
        raise _invalid(
            f"skill name {name[:80]!r} must be 1-{MAX_NAME_CHARS} lower-case letters, digits "
            "and single hyphens (for example 'incident-triage')"
        )


def parse_skill(text: str) -> SkillDocument:
    """Read a `SKILL.md`; raise `MessageError` (code `skill_invalid`) when it has no
    usable front matter. Field values are checked by `check_document`, not here."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise _invalid("SKILL.md must start with a front matter block opened by '---'")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise _invalid("the front matter block is never closed by a '---' line")
    fields = read_front_matter("\n".join(lines[1:end]))
    return SkillDocument(
        name=_text_field(fields.pop("name", "")),
        description=_text_field(fields.pop("description", "")),
        body="\n".join(lines[end + 1 :]).strip("\n"),
        fields=fields,
    )


class _NoAliasLoader(yaml.SafeLoader):
    """The safe loader, refusing anchors and aliases (a "billion laughs" document)."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases are not allowed here", mark
            )
        return super().compose_node(parent, index)


def read_front_matter(block: str) -> dict[str, FieldValue]:
    """The fields of a front matter block (the text between the `---` lines)."""
    if len(block) > MAX_FRONT_MATTER_CHARS:
        raise _invalid(f"the front matter is over {MAX_FRONT_MATTER_CHARS} characters")
    try:
        data = yaml.load(block, Loader=_NoAliasLoader)  # a SafeLoader: no Python objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        # +2: the block starts on the file's second line, and marks count from 0.
        where = f"line {mark.line + 2}: " if mark is not None else ""
        raise _invalid(f"the front matter is not valid YAML: {where}{exc.problem}") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise _invalid(f"the front matter is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _invalid("the front matter is not 'key: value' lines (a YAML mapping)")
    return {str(key): _plain(value) for key, value in data.items()}


def _plain(value: object) -> FieldValue:
    """`value` as JSON-shaped data: YAML's dates become ISO text, other keys text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, datetime.date):
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)  # e.g. bytes from `!!binary`


def _text_field(value: FieldValue) -> str:
    """`name` and `description` are text; a number or a list there is a mistake. The
    newline a `>` or `|` block keeps at its end means nothing in a one-line index."""
    if isinstance(value, str):
        return value.strip()
    if value is None:
        return ""
    raise _invalid(f"'name' and 'description' must be text, not {json.dumps(value)[:60]}")


def render_skill(name: str, description: str, body: str) -> str:
    """The text of a `SKILL.md`; the description is written as a JSON string, which is
    also a valid YAML double-quoted scalar, so any punctuation round-trips."""
    return f"---\nname: {name}\ndescription: {json.dumps(description)}\n---\n\n{body.strip()}\n"


def check_document(doc: SkillDocument, *, label: str, folder: Path | None = None) -> list[Problem]:
    """Every problem of one parsed skill; `folder` (when known) adds the checks that
    need files: the name matches the folder, and referenced files exist."""
    problems = [*_check_name(doc, label, folder), *_check_description(doc, label)]
    problems += _check_body(doc, label)
    if folder is not None:
        problems += _check_references(doc.body, label, folder)
    return problems


def _check_name(doc: SkillDocument, label: str, folder: Path | None) -> list[Problem]:
    if not doc.name:
        return [Problem(label, "name_missing", "the front matter has no 'name'")]
    try:
        check_name(doc.name)
    except MessageError as exc:
        return [Problem(label, "name_invalid", exc.message)]
    if folder is not None and folder.name != doc.name:
        message = f"name {doc.name!r} differs from its folder {folder.name!r}; rename one"
        return [Problem(label, "name_mismatch", message)]
    return []


def _check_description(doc: SkillDocument, label: str) -> list[Problem]:
    text = doc.description.strip()
    if not text:
        return [Problem(label, "description_missing", "the front matter has no 'description'")]
    problems = []
    if len(text) > MAX_DESCRIPTION_CHARS:
        message = f"description is {len(text)} characters; keep it under {MAX_DESCRIPTION_CHARS}"
        problems.append(Problem(label, "description_too_long", message))
    if _TRIGGER.search(text) is None:
        message = (
            "description has no trigger: say when to use the skill with 'Use when …' "
            "(for example 'Use when a production alert fires')"
        )
        problems.append(Problem(label, "trigger_missing", message))
    return problems


def _check_body(doc: SkillDocument, label: str) -> list[Problem]:
    lines = doc.body.splitlines()
    if not doc.body.strip():
        return [Problem(label, "body_empty", "the body is empty; write the skill's principles")]
    problems = []
    if len(lines) > MAX_BODY_LINES:
        message = (
            f"body is {len(lines)} lines; keep it under {MAX_BODY_LINES} and move detail "
            "into files under references/ that the body points to"
        )
        problems.append(Problem(label, "body_too_long", message))
    if len(doc.body) > INVOKE_CHAR_CAP:
        message = (
            f"body is {len(doc.body)} characters; '/{doc.name}' injects only the first "
            f"{INVOKE_CHAR_CAP}, so put the essentials first or move detail to references/"
        )
        problems.append(Problem(label, "body_over_invoke_cap", message, "warning"))
    return problems + _example_problems(lines, label) + _empty_sections(lines, label)


def _example_problems(lines: list[str], label: str) -> list[Problem]:
    """Cheap signs of worked examples, which a body of principles should not carry."""
    reasons = []
    for line in lines:
        heading = _HEADING.fullmatch(line.strip())
        if heading and _EXAMPLE_HEADING.match(heading[1]):
            reasons.append(f"an example heading ({line.strip()[:40]!r})")
    if sum(1 for line in lines if _TRANSCRIPT_LINE.match(line.strip())) >= 2:
        reasons.append("a dialogue or input/output transcript")
    if _longest_fence(lines) > _MAX_FENCE_LINES:
        reasons.append(f"a code block over {_MAX_FENCE_LINES} lines")
    if not reasons:
        return []
    message = (
        f"the body looks like it holds worked examples ({'; '.join(reasons)}); state the "
        "principle instead, or move examples to references/"
    )
    return [Problem(label, "worked_example", message, "warning")]


def _longest_fence(lines: list[str]) -> int:
    longest, start = 0, None
    for index, line in enumerate(lines):
        if line.strip().startswith(("```", "~~~")):
            if start is None:
                start = index
            else:
                longest, start = max(longest, index - start - 1), None
    return longest


def _empty_sections(lines: list[str], label: str) -> list[Problem]:
    problems = []
    for index, line in enumerate(lines):
        heading = _HEADING.fullmatch(line.strip())
        if heading is None or heading[1].lower() not in OPTIONAL_SECTIONS:
            continue
        following = []
        for later in lines[index + 1 :]:
            if _HEADING.fullmatch(later.strip()):
                break
            following.append(later)
        if not any(part.strip() for part in following):
            message = f"section {heading[1]!r} is empty; fill it or remove it"
            problems.append(Problem(label, "section_empty", message, "warning"))
    return problems


def _check_references(body: str, label: str, folder: Path) -> list[Problem]:
    missing = sorted({ref for ref in _REFERENCE.findall(body) if not (folder / ref).is_file()})
    return [
        Problem(label, "reference_missing", f"the body points to {ref}, which does not exist")
        for ref in missing
    ]


def check_folder(folder: Path) -> tuple[SkillDocument | None, list[Problem]]:
    """Parse and check one skill folder; the document is None when it cannot be read."""
    label = str(folder)
    path = folder / SKILL_FILE
    if not path.is_file():
        return None, [Problem(label, "skill_file_missing", f"the folder has no {SKILL_FILE}")]
    try:
        doc = parse_skill(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return None, [Problem(label, "not_utf8", f"{SKILL_FILE} is not UTF-8 text")]
    except MessageError as exc:
        return None, [Problem(label, "front_matter_invalid", exc.message)]
    return doc, check_document(doc, label=label, folder=folder)


def skill_folders(path: Path) -> list[Path]:
    """`path` itself when it is a skill, else its visible sub-folders (a skills root)."""
    if (path / SKILL_FILE).is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def similarity(first: str, second: str) -> float:
    """Jaccard similarity of two descriptions' meaningful words (0 = unrelated, 1 = same)."""
    a, b = _keywords(first), _keywords(second)
    return len(a & b) / len(a | b) if a and b else 0.0


def _keywords(text: str) -> set[str]:
    # A crude stem (a trailing "s") so "incident" and "incidents" count as one word.
    words = (w[:-1] if len(w) > 4 and w.endswith("s") else w for w in _WORD.findall(text.lower()))
    return {w for w in words if len(w) > 2 and w not in _STOPWORDS}


def check_collisions(docs: Sequence[SkillDocument]) -> list[Problem]:
    """Skills that share a name, or whose descriptions would trigger on the same requests."""
    problems = []
    for first, second in combinations(docs, 2):
        pair = f"{first.name} + {second.name}"
        if first.name == second.name:
            message = f"two skills are named {first.name!r}; only one can be found"
            problems.append(Problem(first.name, "name_duplicate", message))
            continue
        score = similarity(first.description, second.description)
        if score >= COLLISION_THRESHOLD:
            message = (
                f"descriptions overlap ({score:.0%} of their words); the model cannot tell "
                "when to pick which: narrow each 'Use when …' to its own situations"
            )
            problems.append(Problem(pair, "description_collision", message))
    return problems


def validate_paths(paths: Iterable[Path]) -> list[Problem]:
    """Every problem of the skills at `paths` (skill folders or folders of skills),
    collisions included across all of them."""
    problems: list[Problem] = []
    docs: list[SkillDocument] = []
    for path in paths:
        if not path.is_dir():
            problems.append(Problem(str(path), "folder_missing", "not a folder"))
            continue
        for folder in skill_folders(path):
            doc, found = check_folder(folder)
            problems += found
            if doc is not None and doc.name:
                docs.append(doc)
    return problems + check_collisions(docs)


def has_errors(problems: Iterable[Problem]) -> bool:
    return any(p.severity == "error" for p in problems)
