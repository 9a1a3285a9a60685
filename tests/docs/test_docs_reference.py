"""The reference pages of the docs site say what the code does: `docs/gen_reference.py
--check` regenerates them in memory from the code and fails on any difference, and the
comparison itself catches a changed, a missing and a stray page."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "docs" / "gen_reference.py"


@functools.cache
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", GENERATOR)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_pages_are_what_the_code_generates() -> None:
    # Its own process: building the services' apps sets process-wide state (telemetry).
    done = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, f"run `make docs`:\n{done.stdout[-6000:]}{done.stderr[-3000:]}"


@pytest.mark.parametrize(
    ("committed", "problem"),
    [
        ({"a.md": "# A\nold\n", "b.md": "# B\n"}, "--- committed/a.md"),
        ({"a.md": "# A\nnew\n"}, "b.md: missing"),
        ({"a.md": "# A\nnew\n", "b.md": "# B\n", "c.md": "x"}, "c.md: not generated"),
    ],
)
def test_drift_names_each_page_that_differs(
    tmp_path: Path, committed: dict[str, str], problem: str
) -> None:
    for name, text in committed.items():
        (tmp_path / name).write_text(text)
    problems = generator().drift({"a.md": "# A\nnew\n", "b.md": "# B\n"}, tmp_path)
    assert len(problems) == 1
    assert problems[0].startswith(problem)


def test_no_drift_when_the_pages_match(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n")
    assert generator().drift({"a.md": "# A\n"}, tmp_path) == []


def test_every_settings_module_is_found() -> None:
    """Each service's settings and the shared ones are read: a new settings module is
    picked up without a list to keep."""
    modules = generator().settings_modules()
    assert modules[0] == "tether_common.settings"
    for expected in (
        "tether_brain.settings",
        "tether_approvals.settings",
        "tether_gateway.settings",
        "tether_output_store.settings",
        "tether_tools_runner.settings",
        "tether_client.local_model",
    ):
        assert expected in modules
