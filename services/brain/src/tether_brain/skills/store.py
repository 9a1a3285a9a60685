"""Skills on disk: found in configured folders, created, read, listed and deleted
through their files (one folder per skill, holding `SKILL.md`).

Scopes: a skill is global (found directly in a configured folder: every tenant reads it)
or a tenant's (kept under `<writable>/.tenants/<tenant>/`, a hidden folder the global
scan never enters: only that tenant sees it). A tenant's view is the global skills, then
its own; a name is unique within a view."""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from tether_brain.skills.model import Skill
from tether_common.errors import ConflictError, ErrorCode, MessageError, NotFoundError
from tether_common.messages.base import ID_PATTERN
from tether_common.skills import (
    SKILL_FILE,
    SkillDocument,
    check_collisions,
    check_document,
    check_name,
    parse_skill,
    render_skill,
    skill_folders,
    user_skills,
)

log = logging.getLogger(__name__)


def default_skill_folders(project: Path | None = None) -> list[Path]:
    """`$TETHER_HOME/skills/` (where new skills are written), then the project's folder."""
    folders = [user_skills()]
    return folders + ([project] if project is not None else [])


TENANTS_DIR = ".tenants"
# A tenant is a path component here: the identity model's ID pattern is one (no slash,
# never `.` or `..`, never hidden: it starts with a letter, digit or underscore).
_TENANT = re.compile(ID_PATTERN)


class SkillStore(Protocol):
    """What the API and the loop need from wherever skills live. `tenant` None is the
    global scope; a tenant's view includes the global skills."""

    def skills(self, tenant: str | None = None) -> list[Skill]: ...

    def by_name(self, tenant: str | None = None) -> dict[str, Skill]: ...

    def every_tenant(self) -> dict[str, dict[str, Skill]]: ...

    def get(self, name: str, tenant: str | None = None) -> Skill: ...

    def create(
        self, name: str, description: str, body: str, tenant: str | None = None
    ) -> Skill: ...

    def delete(self, name: str, tenant: str | None = None) -> None: ...


def check_tenant(tenant: str) -> str:
    """A tenant name safe as one path component (never `..`, a slash or hidden)."""
    if not _TENANT.fullmatch(tenant):
        raise MessageError(f"not a tenant name: {tenant[:80]!r}", code=ErrorCode.INVALID_REQUEST)
    return tenant


class FolderSkillStore:
    """Skills in `folders`, searched in order (the first folder holding a name wins).
    New skills are written to `writable` (default: the first folder); skills found only
    in other folders, such as the shipped ones, are read-only here."""

    def __init__(self, folders: Sequence[Path], *, writable: Path | None = None) -> None:
        self.folders = [Path(f).expanduser() for f in folders]
        self.writable = Path(writable).expanduser() if writable else self._first()

    def _first(self) -> Path | None:
        return self.folders[0] if self.folders else None

    def _tenant_root(self, tenant: str) -> Path | None:
        if self.writable is None:
            return None
        return self.writable / TENANTS_DIR / check_tenant(tenant)

    def skills(self, tenant: str | None = None) -> list[Skill]:
        return sorted(self.by_name(tenant).values(), key=lambda s: s.name)

    def _globals(self) -> dict[str, Skill]:
        found: dict[str, Skill] = {}
        for root in self.folders:
            if not root.is_dir():
                continue
            for folder in skill_folders(root):
                skill = _read(folder)
                if skill is not None:
                    found.setdefault(skill.name, skill)
        return found

    def _own(self, tenant: str) -> dict[str, Skill]:
        root = self._tenant_root(tenant)
        if root is None or not root.is_dir() or root.is_symlink():
            return {}
        found: dict[str, Skill] = {}
        for folder in skill_folders(root):
            skill = _read(folder, tenant)
            if skill is not None:
                found[skill.name] = skill
        return found

    def by_name(self, tenant: str | None = None) -> dict[str, Skill]:
        """The skills `tenant` sees (None: the global ones only); a global name wins."""
        found = self._globals()
        if tenant is not None:
            for name, skill in self._own(tenant).items():
                found.setdefault(name, skill)
        return found

    def every_tenant(self) -> dict[str, dict[str, Skill]]:
        """Each tenant's own skills (not the global ones), for an admin's listing."""
        root = self.writable / TENANTS_DIR if self.writable is not None else None
        if root is None or not root.is_dir():
            return {}
        return {
            folder.name: own
            for folder in sorted(root.iterdir())
            if folder.is_dir()
            and _TENANT.fullmatch(folder.name)
            and (own := self._own(folder.name))
        }

    def get(self, name: str, tenant: str | None = None) -> Skill:
        check_name(name)
        found = self.by_name(tenant).get(name)
        if found is None:
            raise NotFoundError(f"no skill named {name!r}")
        return found

    def create(self, name: str, description: str, body: str, tenant: str | None = None) -> Skill:
        """Write a new skill in `tenant`'s scope (None: global) after the validator's
        checks; errors are refused, warnings are not (they are heuristics)."""
        check_name(name)
        target = self.writable if tenant is None else self._tenant_root(tenant)
        if target is None:
            raise ConflictError(
                "no skill folder is configured for writing", code=ErrorCode.READ_ONLY
            )
        existing = self.by_name(tenant)
        if tenant is None:  # a new global skill is seen by every tenant: no clash anywhere
            for own in self.every_tenant().values():
                for other, skill in own.items():
                    existing.setdefault(other, skill)
        if name in existing:
            raise ConflictError(
                f"a skill named {name!r} already exists", code=ErrorCode.SKILL_EXISTS
            )
        doc = SkillDocument(name=name, description=description.strip(), body=body)
        others = [_document(s) for s in existing.values()]
        problems = check_document(doc, label=name)
        problems += [p for other in others for p in check_collisions([doc, other])]
        if errors := [p for p in problems if p.severity == "error"]:
            raise MessageError("; ".join(p.message for p in errors), code=ErrorCode.SKILL_INVALID)
        return self._write(doc, target, tenant)

    def _write(self, doc: SkillDocument, target: Path, tenant: str | None) -> Skill:
        folder = target / doc.name
        target.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir(parents=True, exist_ok=False)
        except FileExistsError:  # a concurrent create, or a folder that is not a skill
            raise ConflictError(f"{folder} already exists", code=ErrorCode.SKILL_EXISTS) from None
        # Write then rename, so a reader never sees half a file.
        partial = folder / (SKILL_FILE + ".partial")
        partial.write_text(render_skill(doc.name, doc.description, doc.body), encoding="utf-8")
        os.replace(partial, folder / SKILL_FILE)
        log.info("skill %s created in %s", doc.name, target)
        return Skill.from_document(doc, folder, tenant)

    def delete(self, name: str, tenant: str | None = None) -> None:
        """Delete `name` from `tenant`'s own scope (None: the writable global folder);
        a skill seen there but kept elsewhere (shipped, global) is `read_only`."""
        skill = self.get(name, tenant)
        target = self.writable if tenant is None else self._tenant_root(tenant)
        folder = target / name if target is not None else None
        if folder is None or skill.folder != folder:
            message = f"skill {name!r} lives in {skill.folder.parent}, which is read-only here"
            raise ConflictError(message, code=ErrorCode.READ_ONLY)
        if folder.is_symlink():
            folder.unlink()  # remove the link, never what it points to
        else:
            shutil.rmtree(folder)
        log.info("skill %s deleted from %s", name, target)


def _read(folder: Path, tenant: str | None = None) -> Skill | None:
    """The skill in `folder`, or None when it is missing or unusable (logged)."""
    path = folder / SKILL_FILE
    if not path.is_file():
        return None
    try:
        doc = parse_skill(path.read_text(encoding="utf-8"))
        check_name(doc.name)
    except (MessageError, UnicodeDecodeError) as exc:
        log.warning("skill in %s skipped: %s", folder, exc)
        return None
    if doc.name != folder.name:
        log.warning("skill in %s skipped: its name is %r", folder, doc.name)
        return None
    return Skill.from_document(doc, folder, tenant)


def _document(skill: Skill) -> SkillDocument:
    return SkillDocument(name=skill.name, description=skill.description, body=skill.body)
