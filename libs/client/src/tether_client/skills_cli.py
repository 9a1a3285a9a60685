"""`tether skills list|validate`: list the brain's skills, and check skill folders
locally (no server needed; exit 1 when any error is found, 2 when there is nothing to check)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import httpx

from tether_client.client import raise_for_error
from tether_client.ops_cli import client_token
from tether_common.settings import tether_home
from tether_common.skills import skill_folders, validate_paths


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
        out.write(f"{problem}\n")
    checked = sum(len(skill_folders(f)) for f in folders if f.is_dir())
    errors = sum(1 for p in problems if p.severity == "error")
    warnings = len(problems) - errors
    out.write(f"{checked} skill(s) checked: {errors} error(s), {warnings} warning(s)\n")
    return 1 if errors or (strict and warnings) else 0


async def list_main(
    api_url: str,
    *,
    out: TextIO | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    token: str | None = None,
) -> int:
    """Print the skills the brain at `api_url` has, one line each (`transport` lets a
    test serve the API in-process; `token` is the caller's bearer token)."""
    out = out or sys.stdout
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with httpx.AsyncClient(
        base_url=api_url, timeout=30.0, transport=transport, headers=headers
    ) as http:
        response = await http.get("/v1/skills")
        raise_for_error(response)
        skills: list[dict[str, Any]] = response.json()
    for skill in skills:
        out.write(f"{skill['name']:24} {str(skill['description'])[:90]}\n")
    if not skills:
        out.write("no skills\n")
    return 0


def add_subcommands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], api_url: Callable[[], str]
) -> None:
    """Add `skills list|validate` to the `tether` parser's subcommands; each sets `fn`
    to an async function of the parsed arguments, like the other commands. `api_url`
    is called when `list` runs (it reads the environment then)."""
    skills = sub.add_parser("skills", help="list or validate skills").add_subparsers(
        dest="action", required=True
    )

    async def run_list(_args: argparse.Namespace) -> int:
        return await list_main(api_url(), token=client_token())

    async def run_validate(args: argparse.Namespace) -> int:
        return validate_main(args.paths, strict=args.strict)

    skills.add_parser("list", help="the brain's skills").set_defaults(fn=run_list)
    check = skills.add_parser(
        "validate", help="check skill folders: format, trigger, size, collisions"
    )
    check.add_argument("paths", nargs="*", help="skill folders or folders of skills")
    check.add_argument("--strict", action="store_true", help="fail on warnings too")
    check.set_defaults(fn=run_validate)
