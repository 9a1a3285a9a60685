"""The brain's skills API as the client reads it: a skill in a listing and as a whole.
(What creating one takes stays with the brain: it is checked against the skill rules.)"""

from __future__ import annotations

from pydantic import BaseModel


class SkillSummary(BaseModel):
    name: str
    description: str
    tenant: str | None = None  # absent: a global skill


class SkillView(SkillSummary):
    body: str
