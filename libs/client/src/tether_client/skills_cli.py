"""`tether skills list|validate`: list the brain's skills, and check skill folders
locally (no server needed; exit 1 when any error is found, 2 when there is nothing to check)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, TextIO

import httpx
import typer
from pydantic import TypeAdapter

from tether_client.client import raise_for_error
from tether_client.console import Format, OutputOption, emit, rows_table, safe
from tether_client.endpoints import api_url
from tether_client.session import blocking, client_token
from tether_common.messages.skills import SkillSummary
from tether_common.settings import tether_home
from tether_common.skills import skill_folders, validate_paths

_SKILLS = TypeAdapter(list[SkillSummary])


def default_paths() -> list[Path]:
    """The folders the brain reads by default that exist here."""
    candidates = [tether_home() / "skills", Path("skills")]
    return [p for p in candidates if p.is_dir()]


def validate_main(
    paths: Sequence[str | Path], *, strict: bool = False, out: TextIO | None = None
) -> int:
    """Check skill folders (or folders of skills); 1 on errors (or warnings if `strict`)."""
    out = out or sys.stdout
    folders = [Path(p).expanduser() for p in paths] or default_paths()
    if not folders:
        out.write("nothing to validate: pass skill folders or folders of skills\n")
        return 2
    problems = validate_paths(folders)
    for problem in problems:
        out.write(safe(f"{problem}") + "\n")
    checked = sum(len(skill_folders(f)) for f in folders if f.is_dir())
    errors = sum(1 for p in problems if p.severity == "error")
    warnings = len(problems) - errors
    out.write(f"{checked} skill(s) checked: {errors} error(s), {warnings} warning(s)\n")
    return 1 if errors or (strict and warnings) else 0


async def fetch_skills(
    api: str, *, transport: httpx.AsyncBaseTransport | None = None, token: str | None = None
) -> list[SkillSummary]:
    """The skills the brain at `api` has (`transport` lets a test serve the API
    in-process; `token` is the caller's bearer token)."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with httpx.AsyncClient(
        base_url=api, timeout=30.0, transport=transport, headers=headers
    ) as http:
        response = await http.get("/v1/skills")
        raise_for_error(response)
        return _SKILLS.validate_json(response.content)


async def list_main(
    api: str,
    *,
    out: TextIO | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    token: str | None = None,
) -> int:
    """Print the brain's skills, one line each, to `out`."""
    out = out or sys.stdout
    skills = await fetch_skills(api, transport=transport, token=token)
    for skill in skills:
        out.write(safe(f"{skill.name:24} {skill.description[:90]}") + "\n")
    if not skills:
        out.write("no skills\n")
    return 0


app = typer.Typer(help="List the brain's skills, or validate skill folders.", no_args_is_help=True)


@app.command("list")
@blocking
async def skills_list(output: OutputOption = Format.table) -> int:
    """The brain's skills (the index the model sees).

    Example: tether skills list -o json
    """
    skills = await fetch_skills(api_url(), token=client_token())
    rows = [(s.name, s.description[:90]) for s in skills]
    emit(skills, output, rows_table(["SKILL", "DESCRIPTION"], rows) if rows else "no skills")
    return 0


@app.command("validate")
def skills_validate(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Skill folders or folders of skills (default: ~/.tether/skills, ./skills)."
        ),
    ] = None,
    strict: Annotated[bool, typer.Option(help="Fail on warnings too.")] = False,
) -> None:
    """Check skill folders: format, trigger, size, collisions (no server needed); exit 1
    on errors, 2 when there is nothing to check.

    Example: tether skills validate skills/ --strict
    """
    if code := validate_main(paths or [], strict=strict):
        raise typer.Exit(code)
