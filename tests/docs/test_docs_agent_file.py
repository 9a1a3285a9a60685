"""The agent files the README and the agents page show are ones `tether agents apply`
accepts, and the page's still uses every part of a definition it describes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether_client.agents_cli import definition

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "concepts" / "agents.md"
README = ROOT / "README.md"
# What "one agent file using all of it" (issue #31) means: each is a section of the docs.
SHOWN = ("instructions", "prefetch", "output_schema", "fallback", "quota", "grants", "budgets")


def agent_files(page: Path) -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", page.read_text(), flags=re.DOTALL)
    return [found for block in blocks if isinstance(found := yaml.safe_load(block), dict)]


def test_the_agents_page_shows_one_file_with_every_part() -> None:
    [first, *_] = agent_files(PAGE)
    config = definition(first, str(PAGE))
    assert [name for name in SHOWN if name not in config.model_fields_set] == []
    assert config.fallback
    assert config.output_schema
    assert config.quota


@pytest.mark.parametrize("page", [PAGE, README], ids=["agents-page", "readme"])
def test_every_agent_file_shown_is_accepted(page: Path) -> None:
    files = [found for found in agent_files(page) if "id" in found]
    assert files
    for document in files:
        definition(document, str(page))
