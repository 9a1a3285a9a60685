"""Skills live under TETHER_HOME: new skills are written to `$TETHER_HOME/skills`, and the
shipped `skills/` folder is read after it, as read-only defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether_brain.settings import BrainSettings
from tether_brain.skills.store import FolderSkillStore, default_skill_folders
from tether_common.errors import ConflictError
from tether_common.skills import SKILL_FILE, user_skills

SHIPPED = Path(__file__).resolve().parents[2] / "skills"
BODY = "## Principles\n\n- Say what was checked, and how.\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TETHER_BRAIN_SKILL_FOLDERS", raising=False)
    return tmp_path / "home"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_the_writable_skills_folder_is_under_tether_home(home: Path) -> None:
    assert user_skills() == home / "skills"
    assert default_skill_folders(SHIPPED) == [home / "skills", SHIPPED]
    assert BrainSettings().skill_folders[0] == home / "skills"
    assert Path.home() / ".tether" / "skills" not in BrainSettings().skill_folders


def test_new_skills_go_to_tether_home_and_shipped_ones_stay_read_only(home: Path) -> None:
    shipped = [p.name for p in SHIPPED.iterdir() if (p / SKILL_FILE).is_file()]
    assert shipped, "the repository ships skills"
    before = snapshot(SHIPPED)
    store = FolderSkillStore(default_skill_folders(SHIPPED))
    created = store.create(
        "release-notes-check", "Use when writing release notes for a tagged version.", BODY
    )
    assert created.folder == home / "skills" / "release-notes-check"
    assert (home / "skills" / "release-notes-check" / SKILL_FILE).is_file()
    assert {s.name for s in store.skills()} >= {*shipped, "release-notes-check"}
    for name in shipped:
        with pytest.raises(ConflictError) as refused:
            store.delete(name)
        assert refused.value.code == "read_only"
    own = store.create("tenant-only-check", "Use when a tenant checks its own runs.", BODY, "acme")
    assert own.folder.is_relative_to(home / "skills")
    store.delete("release-notes-check")
    assert snapshot(SHIPPED) == before, "the shipped skills were changed"
