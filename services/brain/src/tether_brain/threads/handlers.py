"""Threads over NATS: each `threads.*` route reads its caller from the request's
`Authorization` header and calls the same `ThreadManager` method as the HTTP route."""

from __future__ import annotations

from tether_brain.threads.manager import ThreadManager
from tether_common.bus import Bus
from tether_common.identity import Verifier, bus_principal
from tether_common.messages.threads import (
    CreateThread,
    DeleteThread,
    GetThread,
    ListThreads,
    SendThreadMessage,
    ThreadDeleted,
    ThreadList,
    ThreadTurnAccepted,
    ThreadView,
)


async def serve_threads(bus: Bus, manager: ThreadManager, verifier: Verifier) -> None:
    """Subscribe the thread routes (in the brain's queue group)."""

    async def create(req: CreateThread) -> ThreadView:
        return await manager.create(req, await bus_principal(verifier))

    async def message(req: SendThreadMessage) -> ThreadTurnAccepted:
        return await manager.send(req, await bus_principal(verifier))

    async def get(req: GetThread) -> ThreadView:
        return await manager.get(req.thread_id, await bus_principal(verifier))

    async def listing(req: ListThreads) -> ThreadList:
        return await manager.list_threads(req, await bus_principal(verifier))

    async def delete(req: DeleteThread) -> ThreadDeleted:
        return await manager.delete(req.thread_id, await bus_principal(verifier))

    subjects = bus.subjects
    await bus.serve(subjects.thread_create, create)
    await bus.serve(subjects.thread_message, message)
    await bus.serve(subjects.thread_get, get)
    await bus.serve(subjects.thread_list, listing)
    await bus.serve(subjects.thread_delete, delete)
