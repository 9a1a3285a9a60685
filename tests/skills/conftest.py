"""Fixtures for the skills tests: writing skill folders, and the shipped skills' root."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tether_common.skills import render_skill

SHIPPED = Path(__file__).resolve().parents[2] / "skills"

GOOD_BODY = """# Principles

- Read before you change anything.
- Prefer the smallest change that works.

## Red flags

- You are editing code you have not read.
"""


@pytest.fixture
def shipped() -> Path:
    return SHIPPED


@pytest.fixture
def write_skill(tmp_path: Path) -> Callable[..., Path]:
    """Write `<root>/<name>/SKILL.md` (root defaults to a temporary folder); `text`
    replaces the whole file when given."""

    def write(
        name: str,
        description: str = "Guides careful edits. Use when changing code.",
        body: str = GOOD_BODY,
        *,
        root: Path | None = None,
        text: str | None = None,
    ) -> Path:
        folder = (root or tmp_path / "skills") / name
        folder.mkdir(parents=True, exist_ok=True)
        content = text if text is not None else render_skill(name, description, body)
        (folder / "SKILL.md").write_text(content, encoding="utf-8")
        return folder

    return write
