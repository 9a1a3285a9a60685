"""Skills on disk: found in configured folders, created, read, listed and deleted
through their files (one folder per skill, holding `SKILL.md`)."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from tether_brain.skills.model import Skill
from tether_common.errors import ConflictError, MessageError, NotFoundError
from tether_common.skills import (
    SKILL_FILE,
    SkillDocument,
    check_collisions,
    check_document,
    check_name,
    parse_skill,
    render_skill,
    skill_folders,
)

log = logging.getLogger(__name__)


def default_skill_folders(project: Path | None = None) -> list[Path]:
    """`~/.tether/skills/` (where new skills are written), then the project's folder."""
    folders = [Path.home() / ".tether" / "skills"]
    return folders + ([project] if project is not None else [])


class SkillStore(Protocol):
    """What the API and the loop need from wherever skills live."""

    def skills(self) -> list[Skill]: ...

    def by_name(self) -> dict[str, Skill]: ...

    def get(self, name: str) -> Skill: ...

    def create(self, name: str, description: str, body: str) -> Skill: ...

    def delete(self, name: str) -> None: ...


class FolderSkillStore:
    """Skills in `folders`, searched in order (the first folder holding a name wins).
    New skills are written to `writable` (default: the first folder); skills found only
    in other folders, such as the shipped ones, are read-only here."""

    def __init__(self, folders: Sequence[Path], *, writable: Path | None = None) -> None:
        self.folders = [Path(f).expanduser() for f in folders]
        self.writable = Path(writable).expanduser() if writable else self._first()

    def _first(self) -> Path | None:
        return self.folders[0] if self.folders else None

    def skills(self) -> list[Skill]:
        return sorted(self.by_name().values(), key=lambda s: s.name)

    def by_name(self) -> dict[str, Skill]:
        found: dict[str, Skill] = {}
        for root in self.folders:
            if not root.is_dir():
                continue
            for folder in skill_folders(root):
                skill = _read(folder)
                if skill is not None:
                    found.setdefault(skill.name, skill)
        return found

    def get(self, name: str) -> Skill:
        check_name(name)
        for root in self.folders:
            skill = _read(root / name)
            if skill is not None:
                return skill
        raise NotFoundError(f"no skill named {name!r}")

    def create(self, name: str, description: str, body: str) -> Skill:
        """Write a new skill after the validator's checks; errors are refused, warnings
        are not (they are heuristics)."""
        check_name(name)
        if self.writable is None:
            raise ConflictError("no skill folder is configured for writing", code="read_only")
        existing = self.by_name()
        if name in existing:
            raise ConflictError(f"a skill named {name!r} already exists", code="skill_exists")
        doc = SkillDocument(name=name, description=description.strip(), body=body)
        others = [_document(s) for s in existing.values()]
        problems = check_document(doc, label=name)
        problems += [p for other in others for p in check_collisions([doc, other])]
        if errors := [p for p in problems if p.severity == "error"]:
            raise MessageError("; ".join(p.message for p in errors), code="skill_invalid")
        return self._write(doc)

    def _write(self, doc: SkillDocument) -> Skill:
        assert self.writable is not None
        folder = self.writable / doc.name
        try:
            folder.mkdir(parents=True, exist_ok=False)
        except FileExistsError:  # a concurrent create, or a folder that is not a skill
            raise ConflictError(f"{folder} already exists", code="skill_exists") from None
        # Write then rename, so a reader never sees half a file.
        partial = folder / (SKILL_FILE + ".partial")
        partial.write_text(render_skill(doc.name, doc.description, doc.body), encoding="utf-8")
        os.replace(partial, folder / SKILL_FILE)
        log.info("skill %s created in %s", doc.name, self.writable)
        return Skill.from_document(doc, folder)

    def delete(self, name: str) -> None:
        skill = self.get(name)
        folder = self.writable / name if self.writable is not None else None
        if folder is None or skill.folder != folder:
            message = f"skill {name!r} lives in {skill.folder.parent}, which is read-only here"
            raise ConflictError(message, code="read_only")
        if folder.is_symlink():
            folder.unlink()  # remove the link, never what it points to
        else:
            shutil.rmtree(folder)
        log.info("skill %s deleted from %s", name, self.writable)


def _read(folder: Path) -> Skill | None:
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
    return Skill.from_document(doc, folder)


def _document(skill: Skill) -> SkillDocument:
    return SkillDocument(name=skill.name, description=skill.description, body=skill.body)
