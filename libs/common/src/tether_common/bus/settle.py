"""`settle`: the barrier nats-py's `flush()` promises but does not keep, and that every
subscription of the bus waits on before it counts as ready."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextlib import suppress
from typing import TypeVar

from nats.aio.client import Client as NatsClient

from tether_common.errors import BusError, ErrorCode

T = TypeVar("T")

SETTLE_TIMEOUT_S = 10  # each of `settle`'s two waits (nats-py's own flush default)


async def settle(nc: NatsClient) -> None:
    """Return once the server has processed every command `nc` made before the call (a
    SUB, a PUB): the barrier `flush()` promises but, in nats-py, does not keep. Its PING is
    written straight to the socket while those commands still wait in the client's queue
    for its flusher task, so the PONG can come back before the server has seen them (a
    subscription then misses what another connection publishes next; the server's trace
    shows the SUB after the PING). So the queue is handed to the flusher and written
    first, and only then is the PING sent. Both waits are bounded: nats-py's forced flush
    would otherwise wait as long as a lost connection takes to come back.

    Cancellable at any point without harm, unlike `flush()`: nats-py resolves each PONG's
    future without looking, so one cancelled by a caller that went away (an SSE client
    closing while its subscription settles) raised in its reader, which died, and the
    client, still "connected", heard nothing more. The PONG's future here is shielded:
    a caller that stops waiting leaves it for the PONG to resolve."""
    with suppress(TimeoutError):
        await _kept_cancellable(nc._flush_pending(force_flush=True))
    reading = nc._reading_task
    if not nc.is_connected or reading is None or reading.done():
        return  # no reader to hear a PONG: the queue was written, which is all there is
    pong: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    await _kept_cancellable(nc._send_ping(pong))  # it ends in the same swallowing flush
    try:
        await _kept_cancellable(asyncio.shield(pong))
    except TimeoutError as exc:
        raise BusError(
            f"NATS did not answer a PING within {SETTLE_TIMEOUT_S} s",
            code=ErrorCode.UNREACHABLE,
        ) from exc


async def _kept_cancellable(step: Awaitable[T]) -> T:
    """One of `settle`'s waits, bounded by `SETTLE_TIMEOUT_S`, in a task of its own, with
    the caller's cancellation kept: nats-py's flush swallows one that reaches it, and
    Python 3.11's `wait_for` drops one that arrives as its task finishes. A caller that
    was asked to stop stops here (a pending request to cancel this task is raised)."""
    result = await asyncio.wait_for(step, SETTLE_TIMEOUT_S)
    current = asyncio.current_task()
    if current is not None and current.cancelling():
        raise asyncio.CancelledError
    return result
