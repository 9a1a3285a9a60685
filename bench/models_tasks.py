"""The everyday battery of `python -m bench models`: 30 tasks a person asks an assistant
with tools, each with the files it needs and a check of its outcome (the answer's text,
or what is on disk afterwards). Checks accept the usual ways of writing a value (24- or
12-hour clock, thousands separators) and are computed when checked: "the time now" is
any moment from the task's start to its check, give or take three minutes, so a slow
run (a loaded machine takes minutes a task) is not failed for the minutes it took.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

# A check of (the answer, the workspace after the task, the moment the task started).
Check = Callable[[str, Path, datetime], bool]

FILES: dict[str, str] = {
    "config.ini": "[server]\nhost = 0.0.0.0\nport = 8431\ndebug = false\n",
    "package.json": '{\n  "name": "orbit-ui",\n  "version": "3.14.2",\n  "private": true\n}\n',
    "owner.txt": "This project is maintained by Ingrid Solberg.\n",
    "poem.txt": "Silent lakes at dawn\nherons lift on slow grey wings\nthe mist lets them go\n",
    "reports/q1.md": "# Q1\nRevenue grew 4%.\n",
    "reports/q2.md": "# Q2\nRevenue grew 7%.\n",
    "reports/q3.md": "# Q3\nRevenue fell 2%.\n",
    "notes/ocean.txt": "The blue whale is the largest animal ever known.\n",
    "notes/forest.txt": "Oak trees can live for a thousand years.\n",
    "notes/desert.txt": "Camels store fat, not water, in their humps.\n",
    "src/main.py": "def main():\n    # TODO: parse the arguments\n    print('hi')\n",
    "src/util.py": "def add(a, b):\n    return a + b\n",
    "todo.txt": "buy milk\ncall the plumber\n",
    "settings.ini": "[app]\ndebug=false\ntheme=dark\n",
    "data.csv": "id,name,score\n1,ada,91\n2,bob,78\n3,cyd,85\n4,dee,66\n5,eve,99\n",
}


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    prompt: str
    check: Check
    kind: str
    files: dict[str, str] = field(default_factory=dict)


def says(*options: str) -> Check:
    """The answer holds one of `options` as a whole word or number (case and thousands
    separators ignored): "6" is not found in "2026-12-01"."""

    def check(answer: str, _workspace: Path, _started: datetime) -> bool:
        flat = answer.lower().replace(",", "")
        return any(
            re.search(rf"(?<![\w.]){re.escape(option.lower().replace(',', ''))}(?![\w]|\.\d)", flat)
            for option in options
        )

    return check


def file_is(path: str, wanted: Callable[[str], bool]) -> Check:
    def check(_answer: str, workspace: Path, _started: datetime) -> bool:
        target = workspace / path
        return target.is_file() and wanted(target.read_text(errors="replace"))

    return check


def clock_forms(moment: datetime) -> list[str]:
    """`14:05`, `2:05 PM`, `2:05PM`, `02:05 PM`: the ways a model writes a time."""
    hour12 = moment.hour % 12 or 12
    suffix = "am" if moment.hour < 12 else "pm"
    minute = f"{moment.minute:02d}"
    return [
        f"{moment.hour:02d}:{minute}",
        f"{moment.hour}:{minute}",
        f"{hour12}:{minute} {suffix}",
        f"{hour12}:{minute}{suffix}",
        f"{hour12:02d}:{minute} {suffix}",
    ]


def time_now_in(zone: str) -> Check:
    """The answer names the time in `zone` at a moment of the task's run (from its start
    to now), give or take three minutes."""

    def check(answer: str, _workspace: Path, started: datetime) -> bool:
        now = datetime.now(ZoneInfo(zone))
        first = started.astimezone(ZoneInfo(zone)) - timedelta(minutes=3)
        minutes = int((now - first).total_seconds() // 60) + 4
        forms = [
            form
            for delta in range(minutes)
            for form in clock_forms(first + timedelta(minutes=delta))
        ]
        flat = answer.lower()
        return any(re.search(rf"(?<!\d){re.escape(form)}", flat) for form in forms)

    return check


def converted(clock: str, source: str, target: str) -> Check:
    """The answer names `clock` (today, in `source`) as the wall time in `target`."""

    def check(answer: str, _workspace: Path, _started: datetime) -> bool:
        hour, minute = (int(part) for part in clock.split(":"))
        today = datetime.now(ZoneInfo(source)).date()
        start = datetime(today.year, today.month, today.day, hour, minute, tzinfo=ZoneInfo(source))
        moment = start.astimezone(ZoneInfo(target))
        forms = clock_forms(moment)
        if moment.minute == 0:
            hour12 = moment.hour % 12 or 12
            forms += [f"{hour12} {'am' if moment.hour < 12 else 'pm'}"]
            forms += [f"{hour12}{'am' if moment.hour < 12 else 'pm'}"]
        return any(form in answer.lower() for form in forms)

    return check


def _time_tasks() -> list[Task]:
    places = [
        ("tokyo", "Tokyo", "Asia/Tokyo"),
        ("london", "London", "Europe/London"),
        ("new_york", "New York", "America/New_York"),
        ("sydney", "Sydney", "Australia/Sydney"),
        ("utc", "UTC", "UTC"),
    ]
    tasks = [
        Task(f"time_{key}", f"What time is it in {place} right now?", time_now_in(zone), "time")
        for key, place, zone in places
    ]
    conversions = [
        ("09:00", "London", "Europe/London", "Tokyo", "Asia/Tokyo"),
        ("15:30", "New York", "America/New_York", "London", "Europe/London"),
        ("08:00", "Paris", "Europe/Paris", "Los Angeles", "America/Los_Angeles"),
        ("12:00", "UTC", "UTC", "Kolkata", "Asia/Kolkata"),
    ]
    tasks += [
        Task(
            f"convert_{source.lower().replace(' ', '_')}_{target.lower().replace(' ', '_')}",
            f"When it is {clock} today in {source}, what time is it in {target}?",
            converted(clock, source_zone, target_zone),
            "convert",
        )
        for clock, source, source_zone, target, target_zone in conversions
    ]
    return tasks


def _arithmetic_tasks() -> list[Task]:
    sums = [
        ("multiply", "What is 1234 * 5678?", ("7006652",)),
        ("percent", "What is 17% of 2450?", ("416.5",)),
        ("brackets", "Calculate (345 + 678) * 12.", ("12276",)),
        ("power", "What is 2 to the power of 20?", ("1048576",)),
        ("subtract", "What is 98765 minus 12345?", ("86420",)),
        ("divide", "What is 1000 divided by 8?", ("125",)),
    ]
    return [
        Task(f"math_{key}", prompt, says(*answers), "arithmetic") for key, prompt, answers in sums
    ]


def _file_tasks() -> list[Task]:
    return [
        Task("read_port", "What port is set in config.ini?", says("8431"), "read"),
        Task("read_version", "What version is in package.json?", says("3.14.2"), "read"),
        Task(
            "read_owner",
            "Who maintains the project, according to owner.txt?",
            says("Ingrid"),
            "read",
        ),
        Task(
            "read_first_line", "What is the first line of poem.txt?", says("silent lakes"), "read"
        ),
        Task(
            "list_reports",
            "List the files in the reports folder.",
            says_all("q1.md", "q2.md", "q3.md"),
            "list",
        ),
        Task(
            "count_reports", "How many files are in the reports folder?", says("3", "three"), "list"
        ),
        Task(
            "search_whale",
            "Which file in the notes folder mentions the blue whale?",
            says("ocean.txt"),
            "search",
        ),
        Task(
            "search_todo",
            "Which file under src contains a TODO comment?",
            says("main.py"),
            "search",
        ),
        Task(
            "write_hello",
            "Create a file named hello.txt containing exactly: Hello Tether",
            file_is("hello.txt", lambda text: text.strip() == "Hello Tether"),
            "write",
        ),
        Task(
            "write_shopping",
            "Write a file shopping.txt with the line: apples, pears, plums",
            file_is("shopping.txt", lambda text: "apples, pears, plums" in text),
            "write",
        ),
        Task(
            "edit_todo",
            "In todo.txt, replace the word milk with bread.",
            file_is("todo.txt", lambda text: "bread" in text and "milk" not in text),
            "edit",
        ),
        Task(
            "edit_debug",
            "In settings.ini, change debug=false to debug=true.",
            file_is("settings.ini", lambda text: "debug=true" in text and "theme=dark" in text),
            "edit",
        ),
    ]


def says_all(*parts: str) -> Check:
    def check(answer: str, _workspace: Path, _started: datetime) -> bool:
        return all(part.lower() in answer.lower() for part in parts)

    return check


def _shell_tasks() -> list[Task]:
    return [
        Task(
            "shell_wc",
            "Run the shell command `wc -l data.csv` and tell me the number of lines.",
            says("6", "six"),
            "shell",
        ),
        Task(
            "shell_head",
            "Use the shell to show the first line of data.csv.",
            says("id,name,score", "id name score"),
            "shell",
        ),
        Task(
            "shell_uname",
            "Run `uname -s` in the shell and tell me what it prints.",
            says("linux"),
            "shell",
        ),
    ]


def battery() -> list[Task]:
    """All 30 tasks, grouped by kind."""
    return [*_time_tasks(), *_arithmetic_tasks(), *_file_tasks(), *_shell_tasks()]


def lay_out(workspace: Path) -> None:
    """Write the battery's files afresh (tasks that write or edit start from these)."""
    for name in ("hello.txt", "shopping.txt"):
        (workspace / name).unlink(missing_ok=True)
    for relative, text in FILES.items():
        path = workspace / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def utc_now() -> datetime:
    return datetime.now(UTC)


__all__ = ["FILES", "Task", "battery", "lay_out"]
