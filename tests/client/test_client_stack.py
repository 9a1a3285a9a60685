"""The typed client against the real services: a scripted run read back as typed events
and models, the policy and audit routes as models, a refusal as its error class with its
status, a thread's turns through `chat`, the sync facade doing the same from code
without an event loop, `tether models` reading and writing typed model profiles, and
`wait` answering a run's finished view across a brain killed under it."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether_client import SyncTetherClient, TetherClient
from tether_client.cli import main
from tether_client.server.supervisor import Supervisor
from tether_common.errors import NotFoundError
from tether_common.messages.events import RunEndEvent, ToolCallEvent, ToolResultEvent
from tether_common.messages.runs import TERMINAL_STATUSES, RunEventKind
from tether_common.testing import call, say, write_script

pytestmark = pytest.mark.e2e

OPERATOR_TOKEN = "test-operator-token"  # tests/conftest.py: the bootstrap admin


@pytest.fixture(scope="module")
def stack_extra_env() -> Iterator[dict[str, str]]:
    """The gateway keeps model profiles in a folder of this module's own."""
    with tempfile.TemporaryDirectory(prefix="tether-profiles-") as folder:
        yield {"TETHER_GATEWAY_PROFILES_DIR": folder}


def script(scripts_dir: Path) -> str:
    return write_script(scripts_dir, [[call("calculate", expression="6*7")], say("42")])


async def test_a_run_reads_back_as_models(stack: Supervisor, scripts_dir: Path) -> None:
    async with TetherClient(stack.child("brain").url) as client:
        model = script(scripts_dir)
        accepted = await client.start_run("six times seven?", provider="scripted", model=model)
        events = [e async for e in client.typed_events(accepted.run_id)]
        calls = [e for e in events if isinstance(e, ToolCallEvent)]
        results = [e for e in events if isinstance(e, ToolResultEvent)]
        assert [c.data.name for c in calls] == ["calculate"]
        assert results[0].data.ok
        end = events[-1]
        assert isinstance(end, RunEndEvent)
        assert (end.data.status, end.data.answer) == ("completed", "42")
        run = await client.get_run(accepted.run_id)
        assert (run.status, run.answer) == ("completed", "42")

        report = await client.verify_audit(accepted.run_id, OPERATOR_TOKEN)
        assert report.intact, report.problems
        verdict = await client.explain("calculate", {"expression": "1+1"})
        assert verdict.decision == "allow"
        catalog = await client.tool_catalog("default")
        assert "calculate" in {entry.name for entry in catalog.tools}
        with pytest.raises(NotFoundError) as missing:
            await client.get_run("run_that_never_was")
        assert missing.value.status == 404


async def test_a_thread_through_the_client(stack: Supervisor, scripts_dir: Path) -> None:
    model = write_script(
        scripts_dir, [[call("calculate", expression="6*7")], say("42"), say("still 42")]
    )
    async with TetherClient(stack.child("brain").url) as client:
        thread = await client.create_thread(title="sums", provider="scripted", model=model)
        assert (thread.turns, thread.provider, thread.model) == ([], "scripted", model)
        first = [e async for e in client.chat(thread.thread_id, "six times seven?")]
        assert any(isinstance(e, ToolResultEvent) and e.data.ok for e in first)
        second = [e async for e in client.chat(thread.thread_id, "and again?")]
        ends = [e for e in (first[-1], second[-1]) if isinstance(e, RunEndEvent)]
        assert [e.data.answer for e in ends] == ["42", "still 42"]
        view = await client.get_thread(thread.thread_id)
        assert [(t.turn, t.text, t.answer) for t in view.turns] == [
            (1, "six times seven?", "42"),
            (2, "and again?", "still 42"),
        ]
        listed = await client.list_threads(limit=500)
        assert thread.thread_id in {t.thread_id for t in listed.threads}
        await client.delete_thread(thread.thread_id)
        with pytest.raises(NotFoundError) as gone:
            await client.get_thread(thread.thread_id)
        assert gone.value.status == 404


def follow_with_the_sync_client(url: str, model: str) -> tuple[list[RunEventKind], str | None]:
    with SyncTetherClient(url) as tether:
        accepted = tether.start_run("six times seven?", provider="scripted", model=model)
        kinds = [event.kind for event in tether.typed_events(accepted.run_id)]
        run = tether.wait(accepted.run_id, timeout=120)
        assert run.status in TERMINAL_STATUSES
        return kinds, run.answer


async def test_the_sync_client_from_code_without_a_loop(
    stack: Supervisor, scripts_dir: Path
) -> None:
    # A thread of its own, as a script would call it: no event loop of the caller's.
    kinds, answer = await asyncio.to_thread(
        follow_with_the_sync_client, stack.child("brain").url, script(scripts_dir)
    )
    assert kinds[0] == "run.start"
    assert kinds[-1] == "run.end"
    assert {"tool.call", "tool.result"} <= set(kinds)
    assert answer == "42"


async def test_tether_models_set_show_and_list(
    stack: Supervisor, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TETHER_API_URL", stack.child("brain").url)
    setting = ["models", "set", "scripted/typed-1", "--prompt-tier", "compact", "--grammar"]
    assert await asyncio.to_thread(main, setting) == 0
    assert "stored: scripted  typed-1" in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["models", "show", "scripted/typed-1", "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["prompt_tier"], shown["grammar"], shown["source"]) == ("compact", True, "set")
    assert await asyncio.to_thread(main, ["models", "list", "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert "typed-1" in {p["model"] for p in listed["profiles"]}
    # A field the profile cannot hold is a usage error before anything is sent.
    bad = ["models", "set", "scripted/typed-1", "--context-window", "3"]
    assert await asyncio.to_thread(main, bad) == 2
    assert "context_window" in capsys.readouterr().err


# Keep this test last in the module: it kills the brain the others share (then waits for
# it to be ready again).
async def test_wait_answers_the_finished_run_across_a_brain_restart(
    stack: Supervisor, scripts_dir: Path
) -> None:
    """`wait` follows the run's events; the brain is killed mid-run (its stream drops, its
    address refuses) and started again: the wait resumes and answers the finished view."""
    model = write_script(scripts_dir, [[{"pause_s": 3.0}, {"kind": "chunk", "text": "42"}]])
    brain = stack.child("brain")
    async with TetherClient(brain.url) as client, TetherClient(brain.url) as watcher:
        accepted = await client.start_run("six times seven?", provider="scripted", model=model)
        waiting = asyncio.create_task(client.wait(accepted.run_id, timeout=240))
        async for event in watcher.events(accepted.run_id):
            if event.kind == "run.start":
                break
        assert brain.proc is not None
        stack.kill("brain")  # the model is still pausing: the run is mid-step
        await brain.proc.wait()
        assert not waiting.done()
        await stack.start_child(brain)
        await stack.wait_ready(timeout=180, children=[brain])
        view = await waiting
    assert (view.run_id, view.status, view.answer) == (accepted.run_id, "completed", "42")
