"""The brain's skills API over HTTP: list, create, read and delete skills, each in a
scope (global, or one tenant's) that decides who may read and write it.

Who may: reading needs `skills.read` and shows the global skills and the caller's
tenant's (an admin: every tenant's); writing needs `skills.write` in the skill's scope
(an operator writes its own tenant's skills, only an admin writes global ones). A skill
out of reach answers 404, exactly like a missing one.

Handlers are plain functions: FastAPI runs them in its thread pool, so the file reads
and writes of the store never block the event loop (the principal's dependency is async
and resolved before)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import Field

from tether_brain.api.deps import SkillLibraryDep
from tether_brain.skills import Skill
from tether_common.errors import AuthError, ErrorCode
from tether_common.http import TEXT_BODY_LIMIT, body_limit
from tether_common.identity import Principal
from tether_common.identity.http import Caller
from tether_common.messages.base import ID_PATTERN, CarryableText, RequestModel
from tether_common.messages.skills import SkillSummary, SkillView
from tether_common.skills import MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS

# Any storable text: the store itself refuses names that are not skill names (and says
# so with `not_found` or `skill_invalid`), traversal included.
SkillName = Annotated[CarryableText, Path(max_length=MAX_NAME_CHARS * 4)]
# Which scope an admin means (others always mean their own tenant).
TenantQuery = Annotated[str | None, Query(pattern=ID_PATTERN, max_length=200)]


class CreateSkill(RequestModel):
    """A new skill; the store runs the validator's checks on it as well. `tenant`: the
    scope, for an admin (none: global); an operator's skill is always its tenant's."""

    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    description: str = Field(min_length=1, max_length=MAX_DESCRIPTION_CHARS)
    body: str = Field(min_length=1, max_length=200_000)
    tenant: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)


def _view(skill: Skill) -> SkillView:
    return SkillView(
        name=skill.name, description=skill.description, body=skill.body, tenant=skill.tenant
    )


def _summary(skill: Skill) -> SkillSummary:
    return SkillSummary(name=skill.name, description=skill.description, tenant=skill.tenant)


def read_scope(who: Principal, tenant: str | None) -> str | None:
    """The view `who` reads: its own tenant's; an admin's is the one it names (none:
    the global skills only). Another tenant named by a non-admin is 404."""
    who.require("skills.read")
    if who.reach_of("skills.read") == "all":
        return tenant
    if tenant is not None:
        who.require("skills.read", tenant)
    return who.tenant


def write_scope(who: Principal, tenant: str | None) -> str | None:
    """The scope `who` writes: an admin the one it names (none: global), anyone else
    with `skills.write` its own tenant's (naming another is 404)."""
    who.require("skills.write")
    if who.reach_of("skills.write") == "all":
        return tenant
    if tenant is not None:
        who.require("skills.write", tenant)
    return who.tenant


router = APIRouter(prefix="/v1", tags=["skills"])


@router.get("/skills", response_model_exclude_none=True)
def list_skills(skills: SkillLibraryDep, who: Caller) -> list[SkillSummary]:
    """The global skills and the caller's tenant's (an admin: every tenant's)."""
    who.require("skills.read")
    store = skills.store
    if who.reach_of("skills.read") == "all":
        found = store.skills(None)
        for own in store.every_tenant().values():
            found += sorted(own.values(), key=lambda s: s.name)
        return [_summary(s) for s in found]
    return [_summary(s) for s in store.skills(who.tenant)]


@router.post(
    "/skills",
    status_code=201,
    openapi_extra=body_limit(TEXT_BODY_LIMIT),
    response_model_exclude_none=True,
)
def create_skill(body: CreateSkill, skills: SkillLibraryDep, who: Caller) -> SkillView:
    scope = write_scope(who, body.tenant)
    created = skills.store.create(body.name, body.description, body.body, scope)
    skills.forget()  # the runs' cached views
    return _view(created)


@router.get("/skills/{name}", response_model_exclude_none=True)
def get_skill(
    name: SkillName, skills: SkillLibraryDep, who: Caller, tenant: TenantQuery = None
) -> SkillView:
    return _view(skills.store.get(name, read_scope(who, tenant)))


@router.delete("/skills/{name}", status_code=204)
def delete_skill(
    name: SkillName, skills: SkillLibraryDep, who: Caller, tenant: TenantQuery = None
) -> Response:
    scope = write_scope(who, tenant)
    skill = skills.store.get(name, scope)
    if skill.tenant is None and scope is not None:
        # A global skill seen from a tenant's view: only an admin writes those.
        raise AuthError(
            f"skill {name!r} is global: only an admin may delete it", code=ErrorCode.FORBIDDEN
        )
    skills.store.delete(name, scope)
    skills.forget()
    return Response(status_code=204)
