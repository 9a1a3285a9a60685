"""The brain's skills API over HTTP: list, create, read and delete skills.

Handlers are plain functions: FastAPI runs them in its thread pool, so the file reads
and writes of the store never block the event loop."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from tether_brain.skills import Skill, SkillStore
from tether_common.http import TEXT_BODY_LIMIT, body_limit
from tether_common.messages.base import CarryableText, RequestModel
from tether_common.skills import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS

# Any storable text: the store itself refuses names that are not skill names (and says
# so with `not_found` or `skill_invalid`), traversal included.
SkillName = Annotated[CarryableText, Path(max_length=MAX_NAME_CHARS * 4)]


class SkillSummary(BaseModel):
    name: str
    description: str


class SkillView(SkillSummary):
    body: str


class CreateSkill(RequestModel):
    """A new skill; the store runs the validator's checks on it as well."""

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    description: str = Field(min_length=1, max_length=MAX_DESCRIPTION_CHARS)
    body: str = Field(min_length=1, max_length=200_000)


def _view(skill: Skill) -> SkillView:
    return SkillView(name=skill.name, description=skill.description, body=skill.body)


def skills_router(store: SkillStore) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["skills"])

    @router.get("/skills")
    def list_skills() -> list[SkillSummary]:
        return [SkillSummary(name=s.name, description=s.description) for s in store.skills()]

    @router.post("/skills", status_code=201, openapi_extra=body_limit(TEXT_BODY_LIMIT))
    def create_skill(body: CreateSkill) -> SkillView:
        return _view(store.create(body.name, body.description, body.body))

    @router.get("/skills/{name}")
    def get_skill(name: SkillName) -> SkillView:
        return _view(store.get(name))

    @router.delete("/skills/{name}", status_code=204)
    def delete_skill(name: SkillName) -> Response:
        store.delete(name)
        return Response(status_code=204)

    return router
