"""The figures of issue 33's table with their targets, read off one invocation's results
(ratios only between figures of the same invocation), printed as a table with a
met/missed column and written as markdown for docs/benchmarks.md with its date and
commit. A figure whose sub-command did not run says which one measures it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["FIGURES", "Figure", "Row", "commit_of", "markdown", "rows", "table", "write_markdown"]

Results = Mapping[str, float]
REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"  # git-ignored


def _get(key: str) -> Callable[[Results], float | None]:
    return lambda r: r.get(key)


def _ratio(top: str, bottom: str) -> Callable[[Results], float | None]:
    def value(r: Results) -> float | None:
        a, b = r.get(top), r.get(bottom)
        return a / b if a is not None and b else None

    return value


@dataclass(frozen=True, slots=True)
class Figure:
    """One line of the table: how it is read off the results and what it should be
    (`bound` None: shown, with no target of its own)."""

    label: str
    unit: str
    value: Callable[[Results], float | None]
    source: str  # the sub-command that measures it
    bound: float | None = None
    at_most: bool = True  # the target is value ≤ bound (else value ≥ bound)

    @property
    def target(self) -> str:
        if self.bound is None:
            return "—"
        return f"{'≤' if self.at_most else '≥'} {_number(self.bound, self.unit)}"

    def met(self, value: float) -> bool | None:
        if self.bound is None:
            return None
        return value <= self.bound if self.at_most else value >= self.bound


def _cpu(service: str, bound: float | None = None) -> Figure:
    return Figure(
        f"{service} CPU per step at 50 in flight",
        "ms",
        _get(f"cpu_ms_per_step_50_{service}"),
        "concurrency",
        bound,
    )


_MODELS = "models (separate: needs ../shared/models/fetch-eval-model)"

FIGURES: tuple[Figure, ...] = (
    Figure(
        "durable steps/s at 50 in flight",
        "steps/s",
        _get("tether_50_steps_per_s"),
        "concurrency",
        1000,
        at_most=False,
    ),
    Figure(
        "Tether / LangGraph + PostgreSQL at 50 in flight",
        "x",
        _ratio("tether_50_steps_per_s", "langgraph_sync_50_steps_per_s"),
        "concurrency + langgraph",
        4,
        at_most=False,
    ),
    Figure(
        "Tether / LangGraph at 1 in flight",
        "x",
        _ratio("tether_1_steps_per_s", "langgraph_sync_1_steps_per_s"),
        "concurrency + langgraph",
        2,
        at_most=False,
    ),
    Figure(
        "step p50 at 1 in flight / the floor",
        "x",
        _ratio("tether_1_step_ms", "floor_ms"),
        "concurrency (its own floor)",
        2,
    ),
    _cpu("brain", 0.8),
    _cpu("gateway", 0.25),
    _cpu("tools-runner"),
    _cpu("postgres"),
    _cpu("nats-server"),
    Figure(
        "step time, last 50 / first 50 of a 500-step run",
        "x",
        _get("long_growth"),
        "long",
        1.2,
    ),
    Figure(
        "decision POST → tool.result p99, 1,000 parked",
        "ms",
        _get("decision_result_p99_ms"),
        "approvals",
        20,
    ),
    Figure(
        "the same, each decision once the last one's run ended",
        "ms",
        _get("decision_alone_result_p99_ms"),
        "approvals",
        20,
    ),
    Figure(
        "3 brain replicas / 1, each held to the same CPU share",
        "x",
        _ratio("scaling_3_steps_per_s", "scaling_1_steps_per_s"),
        "scaling",
        2.5,
        at_most=False,
    ),
    # Per task, so the target holds for the worst task; the median and the whole battery
    # are shown beside it.
    Figure(
        "small model: Tether / plain loop, seconds, worst task",
        "x",
        _get("models_worst_task_ratio"),
        _MODELS,
        1.5,
    ),
    Figure(
        "small model: Tether / plain loop, seconds, median task",
        "x",
        _get("models_median_task_ratio"),
        _MODELS,
    ),
    Figure(
        "small model: Tether / plain loop, seconds, all tasks",
        "x",
        _ratio("models_tether_s_per_task", "models_plain_s_per_task"),
        _MODELS,
    ),
)


def _number(value: float, unit: str) -> str:
    if unit == "steps/s":
        return f"{value:,.0f} steps/s"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.2f} {unit}"


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    measured: str
    target: str
    verdict: str  # met, missed, — (no target) or "not run"
    source: str


def rows(results: Results, figures: tuple[Figure, ...] = FIGURES) -> list[Row]:
    found = []
    for figure in figures:
        value = figure.value(results)
        if value is None:
            found.append(Row(figure.label, "—", figure.target, "not run", figure.source))
            continue
        met = figure.met(value)
        verdict = "—" if met is None else ("met" if met else "missed")
        found.append(
            Row(figure.label, _number(value, figure.unit), figure.target, verdict, figure.source)
        )
    return found


HEADER = ("figure", "measured", "target", "met?", "from `python -m bench …`")


def table(found: list[Row]) -> str:
    """The rows as aligned text, for the terminal."""
    cells = [HEADER, *((r.label, r.measured, r.target, r.verdict, r.source) for r in found)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in cells
    )


def commit_of(repo: Path = REPO) -> str:
    """`git rev-parse --short HEAD`, and whether the tree has changes not committed."""
    try:
        head = _git(repo, "rev-parse", "--short", "HEAD").strip()
        dirty = bool(_git(repo, "status", "--porcelain", "--untracked-files=no").strip())
    except (OSError, subprocess.CalledProcessError):
        return "an unknown commit (no git here)"
    return f"commit `{head}`" + (" with uncommitted changes" if dirty else "")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout


def markdown(found: list[Row], commit: str, loads: list[float], when: datetime) -> str:
    """The table for docs/benchmarks.md: its date, commit and how busy the machine was."""
    busy = f"load average {min(loads):.1f}–{max(loads):.1f}" if loads else "load not recorded"
    lines = [
        f"Recorded {when.astimezone(UTC):%Y-%m-%d %H:%M} UTC on {commit} ({busy}).",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += [
        f"| {r.label} | {r.measured} | {r.target} | {r.verdict} | {r.source} |" for r in found
    ]
    return "\n".join(lines) + "\n"


def write_markdown(
    found: list[Row], loads: list[float], folder: Path = RESULTS_DIR, when: datetime | None = None
) -> Path:
    """The markdown in `folder`, one file per invocation; returns its path."""
    when = when or datetime.now(UTC)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"summary-{when.astimezone(UTC):%Y%m%dT%H%M%SZ}.md"
    path.write_text(markdown(found, commit_of(), loads, when), encoding="utf-8")
    return path
