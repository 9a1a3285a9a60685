"""The summary `python -m bench` ends with: issue 33's figures read off one invocation's
results, met or missed against their targets, the ones not measured named with the
sub-command that measures them, and the markdown for docs/benchmarks.md with its date,
commit and load."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bench.targets import FIGURES, Figure, commit_of, markdown, rows, table, write_markdown

# Every figure measured: what one `python -m bench floor concurrency long langgraph
# approvals scaling` run and one `bench models` run leave behind.
FULL = {
    "tether_50_steps_per_s": 1100.0,
    "tether_1_steps_per_s": 300.0,
    "tether_1_step_ms": 3.0,
    "floor_ms": 1.6,
    "langgraph_sync_50_steps_per_s": 220.0,
    "langgraph_sync_1_steps_per_s": 200.0,
    "cpu_ms_per_step_50_brain": 0.9,
    "cpu_ms_per_step_50_gateway": 0.2,
    "cpu_ms_per_step_50_tools-runner": 0.23,
    "cpu_ms_per_step_50_postgres": 0.42,
    "cpu_ms_per_step_50_nats-server": 0.17,
    "long_growth": 1.61,
    "decision_result_p99_ms": 19.0,
    "decision_alone_result_p99_ms": 21.0,
    "scaling_1_steps_per_s": 100.0,
    "scaling_3_steps_per_s": 260.0,
    "models_tether_s_per_task": 30.0,
    "models_plain_s_per_task": 10.0,
    "models_worst_task_ratio": 4.2,
    "models_median_task_ratio": 1.1,
}


def verdicts(results: dict[str, float]) -> dict[str, str]:
    return {r.label: r.verdict for r in rows(results)}


def test_every_figure_of_the_issue_is_read_with_its_verdict() -> None:
    found = {r.label: (r.measured, r.target, r.verdict) for r in rows(FULL)}
    assert len(found) == len(FIGURES) == 16
    assert found["durable steps/s at 50 in flight"] == ("1,100 steps/s", "≥ 1,000 steps/s", "met")
    assert found["Tether / LangGraph + PostgreSQL at 50 in flight"] == ("5.00x", "≥ 4.00x", "met")
    assert found["Tether / LangGraph at 1 in flight"] == ("1.50x", "≥ 2.00x", "missed")
    assert found["step p50 at 1 in flight / the floor"] == ("1.88x", "≤ 2.00x", "met")
    assert found["brain CPU per step at 50 in flight"] == ("0.90 ms", "≤ 0.80 ms", "missed")
    assert found["gateway CPU per step at 50 in flight"] == ("0.20 ms", "≤ 0.25 ms", "met")
    assert found["postgres CPU per step at 50 in flight"] == ("0.42 ms", "—", "—")
    assert found["step time, last 50 / first 50 of a 500-step run"][2] == "missed"
    assert found["decision POST → tool.result p99, 1,000 parked"][2] == "met"
    assert found["the same, each decision once the last one's run ended"][2] == "missed"
    assert found["3 brain replicas / 1, each held to the same CPU share"] == (
        "2.60x",
        "≥ 2.50x",
        "met",
    )
    # The target is per task: the worst task is held to it, the median and the whole
    # battery are shown.
    assert found["small model: Tether / plain loop, seconds, worst task"] == (
        "4.20x",
        "≤ 1.50x",
        "missed",
    )
    assert found["small model: Tether / plain loop, seconds, median task"] == ("1.10x", "—", "—")
    assert found["small model: Tether / plain loop, seconds, all tasks"] == ("3.00x", "—", "—")


@pytest.mark.parametrize(
    ("at_most", "bound", "value", "verdict"),
    [
        (True, 20.0, 20.0, "met"),  # a bound reached is met
        (True, 20.0, 20.01, "missed"),
        (False, 2.5, 2.5, "met"),
        (False, 2.5, 2.49, "missed"),
        (True, None, 5.0, "—"),
    ],
)
def test_bounds(at_most: bool, bound: float | None, value: float, verdict: str) -> None:
    figure = Figure("f", "ms", lambda r: r.get("v"), "x", bound, at_most)
    assert [r.verdict for r in rows({"v": value}, (figure,))] == [verdict]


@pytest.mark.parametrize(
    ("left_out", "figure"),
    [
        ("models_worst_task_ratio", "small model: Tether / plain loop, seconds, worst task"),
        ("models_plain_s_per_task", "small model: Tether / plain loop, seconds, all tasks"),
        ("langgraph_sync_50_steps_per_s", "Tether / LangGraph + PostgreSQL at 50 in flight"),
        ("scaling_1_steps_per_s", "3 brain replicas / 1, each held to the same CPU share"),
        ("decision_result_p99_ms", "decision POST → tool.result p99, 1,000 parked"),
        ("cpu_ms_per_step_50_brain", "brain CPU per step at 50 in flight"),
    ],
)
def test_a_figure_not_measured_says_so_and_where_it_comes_from(left_out: str, figure: str) -> None:
    partial = {k: v for k, v in FULL.items() if k != left_out}
    found = {r.label: r for r in rows(partial)}
    assert (found[figure].measured, found[figure].verdict) == ("—", "not run")
    assert found[figure].source  # the sub-command to run
    assert sum(r.verdict == "not run" for r in found.values()) == 1


def test_a_zero_denominator_is_not_a_figure() -> None:
    assert verdicts(FULL | {"scaling_1_steps_per_s": 0.0})[
        "3 brain replicas / 1, each held to the same CPU share"
    ] == ("not run")


def test_the_text_table_is_aligned() -> None:
    lines = table(rows(FULL)).splitlines()
    assert lines[0].startswith("figure")
    assert len(lines) == 1 + len(FIGURES)
    column = lines[0].index("target")
    assert all(line[column - 2 : column] == "  " for line in lines)


def test_markdown_has_date_commit_load_and_a_row_per_figure() -> None:
    when = datetime(2026, 12, 6, 13, 5, tzinfo=UTC)
    text = markdown(rows(FULL), "commit `abc1234`", [2.5, 7.3, 4.0], when)
    first, _, header, rule, *body = text.splitlines()
    assert first == "Recorded 2026-12-06 13:05 UTC on commit `abc1234` (load average 2.5–7.3)."
    assert header.startswith("| figure | measured | target | met? |")
    assert rule == "|---|---|---|---|---|"
    assert len(body) == len(FIGURES)
    assert "| durable steps/s at 50 in flight | 1,100 steps/s | ≥ 1,000 steps/s | met |" in body[0]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_commit_says_when_the_tree_has_uncommitted_changes(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = _git(tmp_path, "rev-parse", "--short", "HEAD")
    assert commit_of(tmp_path) == f"commit `{head}`"
    (tmp_path / "a.txt").write_text("two\n")
    assert commit_of(tmp_path) == f"commit `{head}` with uncommitted changes"
    assert commit_of(tmp_path / "missing").startswith("an unknown commit")


def test_write_markdown_writes_one_file_per_invocation(tmp_path: Path) -> None:
    when = datetime(2026, 12, 6, 13, 5, 9, tzinfo=UTC)
    path = write_markdown(rows(FULL), [1.0], tmp_path / "results", when)
    assert path.name == "summary-20261206T130509Z.md"
    assert path.read_text(encoding="utf-8").startswith("Recorded 2026-12-06 13:05 UTC on ")
