"""The skill store through the brain's HTTP router, on a bare app with temporary folders."""

from __future__ import annotations

import io
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tether_brain.api import skills
from tether_brain.api.deps import SKILLS
from tether_brain.api.static_verifier import StaticVerifier
from tether_brain.skills import FolderSkillStore
from tether_brain.tools.local import SkillLibrary
from tether_client.skills_cli import list_main
from tether_common.http import install_error_handlers

WriteSkill = Callable[..., Path]
# An admin (global skills are written by admins; tenants' skills: tests/identity).
ADMIN_TOKEN = "skills-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
NEW = {
    "name": "careful-edit",
    "description": "Guides careful edits to code. Use when changing code.",
    "body": "- Read first.\n- Change little.",
}


def app_for(store: FolderSkillStore) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app, "test")
    setattr(app.state, SKILLS, SkillLibrary(store))
    app.state.verifier = StaticVerifier(ADMIN_TOKEN, {})
    app.include_router(skills.router)
    return app


@pytest.fixture
def folders(tmp_path: Path, shipped: Path) -> tuple[Path, Path]:
    """A writable user folder, and a copy of the shipped skills as a read-only project folder."""
    user, project = tmp_path / "user", tmp_path / "project"
    shutil.copytree(shipped, project)
    return user, project


@pytest.fixture
def transport(folders: tuple[Path, Path]) -> httpx.ASGITransport:
    return httpx.ASGITransport(app=app_for(FolderSkillStore(folders)))


@pytest.fixture
async def client(transport: httpx.ASGITransport) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=transport, base_url="http://brain", headers=ADMIN
    ) as http:
        yield http


def error_of(response: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message"}
    return error


async def test_create_read_list_delete(
    client: httpx.AsyncClient, folders: tuple[Path, Path]
) -> None:
    created = await client.post("/v1/skills", json=NEW)
    assert created.status_code == 201
    assert created.json() == NEW
    assert (folders[0] / "careful-edit" / "SKILL.md").is_file()
    assert (await client.get("/v1/skills/careful-edit")).json() == NEW
    listed = (await client.get("/v1/skills")).json()
    assert [s["name"] for s in listed] == [
        "careful-edit",
        "coding-task",
        "data-report",
        "incident-triage",
        "research-brief",
    ]
    assert set(listed[0]) == {"name", "description"}
    assert (await client.delete("/v1/skills/careful-edit")).status_code == 204
    assert not (folders[0] / "careful-edit").exists()
    missing = await client.get("/v1/skills/careful-edit")
    assert missing.status_code == 404
    assert error_of(missing)["code"] == "not_found"


async def test_bad_bodies_get_structured_422(client: httpx.AsyncClient) -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"name": "x"}, "invalid_request", "description"),
        (NEW | {"extra": 1}, "invalid_request", "extra"),
        (NEW | {"description": "Edits code."}, "skill_invalid", "Use when"),
        (NEW | {"name": "Not_Valid"}, "skill_invalid", "lower-case"),
        (NEW | {"body": "   "}, "skill_invalid", "empty"),
    ]
    for body, code, fragment in cases:
        response = await client.post("/v1/skills", json=body)
        assert response.status_code == 422, body
        error = error_of(response)
        assert error["code"] == code
        assert fragment in error["message"]
    not_json = await client.post("/v1/skills", content=b"{", headers={"content-type": "x"})
    assert not_json.status_code == 422


async def test_duplicates_and_collisions_are_refused(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/skills", json=NEW)).status_code == 201
    again = await client.post("/v1/skills", json=NEW)
    assert again.status_code == 409
    assert error_of(again)["code"] == "skill_exists"
    shipped_name = await client.post("/v1/skills", json=NEW | {"name": "coding-task"})
    assert shipped_name.status_code == 409
    twin = await client.post("/v1/skills", json=NEW | {"name": "careful-edit-two"})
    assert twin.status_code == 422
    assert "overlap" in error_of(twin)["message"]


@pytest.mark.parametrize("name", ["%2E%2E", "..%2F..%2Fsecret", "%2Fetc%2Fpasswd", ".hidden"])
async def test_path_traversal_is_refused(
    client: httpx.AsyncClient, folders: tuple[Path, Path], tmp_path: Path, name: str
) -> None:
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "SKILL.md").write_text("---\nname: secret\n---\nTOP SECRET\n")
    for method in ("GET", "DELETE"):
        response = await client.request(method, f"/v1/skills/{name}")
        assert response.status_code in (404, 422), (method, name)
        assert "TOP SECRET" not in response.text
        assert error_of(response)["code"] in ("not_found", "skill_invalid")
    assert (tmp_path / "secret" / "SKILL.md").is_file()
    assert (folders[1] / "coding-task" / "SKILL.md").is_file()
    traversal = await client.post("/v1/skills", json=NEW | {"name": "../escape"})
    assert traversal.status_code == 422
    assert not (tmp_path / "escape").exists()


async def test_skills_outside_the_writable_folder_are_read_only(
    client: httpx.AsyncClient, folders: tuple[Path, Path]
) -> None:
    assert (await client.get("/v1/skills/coding-task")).status_code == 200
    response = await client.delete("/v1/skills/coding-task")
    assert response.status_code == 409
    assert error_of(response)["code"] == "read_only"
    assert (folders[1] / "coding-task" / "SKILL.md").is_file()


def test_store_precedence_and_unusable_skills(write_skill: WriteSkill, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_skill("same", "First wins. Use when testing.", root=first)
    write_skill("same", "Second loses. Use when testing.", root=second)
    write_skill("broken", text="no front matter", root=second)
    write_skill(
        "misnamed", text="---\nname: other\ndescription: Use when x.\n---\nb\n", root=second
    )
    store = FolderSkillStore([first, second, tmp_path / "absent"])
    assert [s.name for s in store.skills()] == ["same"]
    assert store.get("same").description == "First wins. Use when testing."


async def test_list_command_reads_the_api(
    client: httpx.AsyncClient, transport: httpx.ASGITransport
) -> None:
    await client.post("/v1/skills", json=NEW)
    out = io.StringIO()
    assert await list_main("http://brain", out=out, transport=transport, token=ADMIN_TOKEN) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("careful-edit ")
    assert len(lines) == 5
