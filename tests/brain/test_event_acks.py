"""A step's events are sent once its commit returns and their acks are read before the
run's next commit (or as its task lets go), so the step's model call does not wait for
the stream. What that must not cost: events whose acks fail are sent again in front of
the next commit's, so every event reaches the stream, in the order it was made; a run
that parks or ends has had all its acks read; a task cancelled meanwhile does not wait."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from builtin_tools import RUNNER_TOOLS
from tether_brain.testing import Harness, LocalRunner, MemoryEvents
from tether_brain.testing.events import Kept
from tether_common.errors import BusError
from tether_common.messages.tools import ExecuteTool, ToolResult
from tether_common.testing import call, say


async def answer(request: ExecuteTool) -> ToolResult:
    return ToolResult(call_id=request.call_id, name=request.name, ok=True, content="4")


class Acks(Kept):
    """Acks read later; `fail` makes reading them raise as a lost stream does."""

    def __init__(self, fail: bool) -> None:
        self.fail, self.read, self.abandoned = fail, False, False

    async def confirmed(self, timeout: float = 10.0) -> None:
        self.read = True
        if self.fail:
            raise BusError("JetStream publish failed: timeout")

    def abandon(self) -> None:
        self.abandoned = True


class Flaky(MemoryEvents):
    """The stream stores nothing of the sends numbered in `failing` (their acks fail);
    every send's message ids and acks are kept, in order."""

    def __init__(self, failing: set[int]) -> None:
        super().__init__()
        self.failing = failing
        self.sends: list[list[str]] = []
        self.acks: list[Acks] = []

    async def js_send_many(self, items: Sequence[tuple[str, bytes, str]]) -> Kept:
        number = len(self.sends)
        self.sends.append([msg_id for _, _, msg_id in items])
        acks = Acks(number in self.failing)
        self.acks.append(acks)
        if number not in self.failing:
            await super().js_send_many(items)
        return acks


def harness(tmp_path: Path, events: MemoryEvents) -> Harness:
    return Harness(LocalRunner(RUNNER_TOOLS, answer), workspace=tmp_path, events=events)


SCRIPT = [[call("calculate", expression="2+2")], [call("calculate", expression="3+3")], say("4")]


async def test_events_whose_acks_fail_are_sent_again_first_and_all_arrive_in_order(
    tmp_path: Path,
) -> None:
    events = Flaky(failing={1})
    run = await harness(tmp_path, events).run(SCRIPT)
    assert run.state.status == "completed"
    seqs = [e.seq for e in run.events]
    assert seqs == list(range(1, len(seqs) + 1))  # every event, once, in order
    lost, next_send = events.sends[1], events.sends[2]
    assert next_send[: len(lost)] == lost  # sent again, ahead of the next commit's own
    assert all(a.read for a in events.acks)  # nothing left unread when the run ended


async def test_a_parked_run_has_read_its_acks(tmp_path: Path) -> None:
    events = Flaky(failing=set())
    run = await harness(tmp_path, events).run(
        [[call("shell", command="rm -rf build")], say("done")], interactive=True
    )
    assert run.state.status == "awaiting_approval"
    assert events.acks
    assert all(a.read for a in events.acks)
    assert [e.kind for e in run.events][-1] == "tool.approval_needed"


async def test_a_task_cancelled_with_acks_unread_does_not_wait_for_them(tmp_path: Path) -> None:
    events = Flaky(failing=set())
    started, calls = asyncio.Event(), []

    async def hangs_second(request: ExecuteTool) -> ToolResult:
        calls.append(request)
        if len(calls) == 2:  # the first step's commit sent its events meanwhile
            started.set()
            await asyncio.Event().wait()
        return await answer(request)

    loop = Harness(LocalRunner(RUNNER_TOOLS, hangs_second), workspace=tmp_path, events=events)
    task = asyncio.create_task(loop.run(SCRIPT))
    await asyncio.wait_for(started.wait(), 5)
    unread = events.acks[-1]
    assert not unread.read
    task.cancel()  # a fence or a shutdown
    done, _ = await asyncio.wait([task], timeout=5)
    assert done
    assert unread.abandoned  # given up, not awaited
    assert not unread.read
