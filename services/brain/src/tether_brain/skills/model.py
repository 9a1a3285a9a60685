"""`Skill`: a stored skill as the brain uses it (parsed, checked, with its folder)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tether_common.skills import SkillDocument

# The index shows this much of a description; the validator caps descriptions at 1,024
# characters, and the index is paid for on every turn.
INDEX_DESCRIPTION_CHARS = 300


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    body: str
    folder: Path
    # Whose: None for a global skill (every tenant reads it, only admins write it), else
    # the one tenant whose runs and operators see it.
    tenant: str | None = None

    @classmethod
    def from_document(cls, doc: SkillDocument, folder: Path, tenant: str | None = None) -> Skill:
        return cls(
            name=doc.name,
            description=doc.description.strip(),
            body=doc.body,
            folder=folder,
            tenant=tenant,
        )

    def index_line(self) -> str:
        """The skill's one line in the system prompt's index."""
        description = " ".join(self.description.split())
        if len(description) > INDEX_DESCRIPTION_CHARS:
            description = description[: INDEX_DESCRIPTION_CHARS - 1] + "…"
        return f"- {self.name}: {description}"
