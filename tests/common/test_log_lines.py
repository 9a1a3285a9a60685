"""What a service's log says at start (issue 29, item 2): no library's private fields
(uvicorn's `color_message`) in either format, and the routine of alembic and uvicorn
(every migration step, the start-up banner) heard only at debug level."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from tether_common.settings import CommonSettings
from tether_common.telemetry import ROUTINE_LOGGERS, JsonFormatter, TextFormatter, setup_logging


def uvicorn_record() -> logging.LogRecord:
    """A record as uvicorn logs its banner: the message with a coloured copy as an extra."""
    return logging.makeLogRecord(
        {
            "name": "uvicorn.error",
            "levelno": logging.INFO,
            "levelname": "INFO",
            "msg": "Uvicorn running on %s",
            "args": ("http://127.0.0.1:8700",),
            "color_message": "Uvicorn running on \x1b[1m%s\x1b[0m",
            "run_note": "kept",  # an extra of ours is still said
        }
    )


@pytest.mark.parametrize(
    "formatter", [TextFormatter(), JsonFormatter("brain")], ids=["text", "json"]
)
def test_a_library_s_coloured_copy_of_the_message_is_left_out(
    formatter: logging.Formatter,
) -> None:
    line = formatter.format(uvicorn_record())
    assert "color_message" not in line
    assert "\x1b[" not in line
    assert "\\u001b" not in line
    assert "Uvicorn running on http://127.0.0.1:8700" in line
    assert "kept" in line
    if isinstance(formatter, JsonFormatter):
        assert json.loads(line)["run_note"] == "kept"


@pytest.fixture
def restored_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in (*ROUTINE_LOGGERS, "httpx")}
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, was in levels.items():
            logging.getLogger(name).setLevel(was)


@pytest.mark.parametrize(
    ("level", "routine_heard"),
    [("INFO", False), ("WARNING", False), ("DEBUG", True)],
)
@pytest.mark.usefixtures("restored_logging")
@pytest.mark.parametrize(
    "logger", ["alembic.runtime.migration", "uvicorn.error", "alembic.env"], ids=str
)
def test_routine_of_alembic_and_uvicorn_is_heard_only_at_debug(
    level: str, routine_heard: bool, logger: str
) -> None:
    setup_logging("brain", CommonSettings(log_level=level))
    routine = logging.getLogger(logger)
    assert routine.isEnabledFor(logging.INFO) is routine_heard
    assert routine.isEnabledFor(logging.WARNING)  # a problem is always heard
    assert logging.getLogger("tether_common.service").isEnabledFor(logging.INFO) is (
        level != "WARNING"
    )
