"""Runs over NATS, the client API: each `runs.*` route reads its caller from the request's
`Authorization` header and calls the same `RunManager` method as the HTTP route, under
the same rules."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tether_brain.runs.manager import RunManager
from tether_common.bus import Bus
from tether_common.identity import Verifier, bus_principal
from tether_common.messages.deltas import RunDelta
from tether_common.messages.runs import (
    TERMINAL_STATUSES,
    FollowRun,
    GetRun,
    ListRuns,
    QueueMessage,
    RunAccepted,
    RunEventFrame,
    RunList,
    RunView,
    StartRun,
    StopRun,
)


async def serve_runs(bus: Bus, manager: RunManager, verifier: Verifier) -> None:
    """Subscribe the run routes (in the brain's queue group)."""

    async def start_run(req: StartRun) -> RunAccepted:
        return await manager.start(req, await bus_principal(verifier))

    async def get_run(req: GetRun) -> RunView:
        return await manager.get(req.run_id, await bus_principal(verifier))

    async def list_runs(req: ListRuns) -> RunList:
        return await manager.list_runs(req, await bus_principal(verifier))

    async def stop_run(req: StopRun) -> RunAccepted:
        return await manager.stop(req, await bus_principal(verifier))

    async def queue_message(req: QueueMessage) -> RunAccepted:
        return await manager.queue_message(req, await bus_principal(verifier))

    def follow_run(req: FollowRun) -> AsyncIterator[RunEventFrame]:
        return follow(manager, req, verifier)

    subjects = bus.subjects
    await bus.serve(subjects.run_start, start_run)
    await bus.serve(subjects.run_get, get_run)
    await bus.serve(subjects.run_list, list_runs)
    await bus.serve(subjects.run_stop, stop_run)
    await bus.serve(subjects.run_message, queue_message)
    await bus.serve_stream(subjects.run_follow, follow_run)


async def follow(
    manager: RunManager, req: FollowRun, verifier: Verifier
) -> AsyncIterator[RunEventFrame]:
    """A run's events and deltas as frames, then how the stream ended. As the HTTP event
    stream: `follow` refuses (401/404) before any event is sent."""
    await manager.follow(req.run_id, await bus_principal(verifier))
    last, ended = req.after_seq, False
    live = manager.live(req.run_id, req.after_seq, deltas=req.deltas, idle_s=req.idle_s)
    async for item in live:
        if isinstance(item, RunDelta):
            yield RunEventFrame(delta=item)
            continue
        last, ended = item.seq, item.kind == "run.end"
        yield RunEventFrame(event=item)
    if not ended:  # a caller already past `run.end` met none, nor one from the journal
        status, _ = await manager.store.queries.status(req.run_id)
        ended = status in TERMINAL_STATUSES
    yield RunEventFrame(end="run_end" if ended else "idle", last_seq=last)
