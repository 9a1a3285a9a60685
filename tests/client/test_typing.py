"""A consumer's code type-checks against the client as installed (`py.typed`, no repository
config): `mypy --strict` accepts correct use of `TetherClient` and `SyncTetherClient`
(results and events narrowed by `kind`) and refuses a missing attribute or a wrong type."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

GOOD = """
from tether_client import SyncTetherClient, TetherClient
from tether_common.messages.runs import RunStatus
from tether_common.messages.threads import ThreadTurnAccepted


async def status(client: TetherClient) -> RunStatus:
    run = await client.get_run("run_1")
    return run.status


async def turn(client: TetherClient) -> ThreadTurnAccepted:
    thread = await client.create_thread(agent="writer")
    return await client.send_message(thread.thread_id, "hello")


def answer(client: SyncTetherClient) -> str | None:
    for event in client.chat("thr_1", "hello"):
        if event.kind == "run.end":
            return event.data.answer  # the union narrowed by kind
    return client.get_run("run_1").answer
"""

BAD = """
from tether_client import SyncTetherClient, TetherClient


async def missing(client: TetherClient) -> object:
    run = await client.get_run("run_1")
    return run.no_such_field


def wrong(client: SyncTetherClient) -> int:
    return client.get_run("run_1").status
"""


def test_mypy_strict_sees_the_clients_types(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(textwrap.dedent(GOOD))
    (tmp_path / "bad.py").write_text(textwrap.dedent(BAD))
    # Run from the temporary folder: no repository config, the packages as installed.
    cache = str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", cache, "good.py", "bad.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not [e for e in errors if e.startswith("good.py")], done.stdout
    assert any(
        re.match(r'bad\.py:7: error: "RunView" has no attribute "no_such_field"', e) for e in errors
    ), done.stdout
    assert any(e.startswith("bad.py:11: error: Incompatible return value") for e in errors), (
        done.stdout
    )
