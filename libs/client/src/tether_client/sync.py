"""`SyncTetherClient`: the same API as `TetherClient`, blocking, for code without an event
loop (scripts, notebooks, WSGI apps).

There is one definition of each method, the async one: every sync method is that method
run on a private event loop in a thread of its own (`blocking` and `blocking_iter` turn
`TetherClient.get_run` into a sync `get_run` with the same parameters and result type,
checked by mypy). An async iterator (a run's events) becomes a plain iterator whose
items are fetched on that loop one at a time; leaving the loop early closes the stream.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import httpx

from tether_client.client import DEFAULT_API_URL, TetherClient

__all__ = ["SyncTetherClient"]

P = ParamSpec("P")
T = TypeVar("T")


class _Loop:
    """An event loop running in a daemon thread; `run` waits for a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="tether-client", daemon=True
        )
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.loop.is_closed():
            coro.close()  # never started: no "never awaited" warning
            raise RuntimeError("this SyncTetherClient is closed")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            # Ctrl-C (or any interruption) while waiting: cancel the call on the loop too,
            # so no request goes on behind the caller's back.
            future.cancel()
            raise

    def stop(self) -> None:
        if not self.loop.is_closed():
            # Streams a caller dropped without closing are closed here, on their own loop.
            self.run(self.loop.shutdown_asyncgens())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
            self.loop.close()


async def _next(stream: AsyncIterator[T]) -> T:
    return await anext(stream)


def _iterate(loop: _Loop, stream: AsyncIterator[T]) -> Iterator[T]:
    """`stream`'s items, each awaited on `loop`; closed on the loop however it ends."""
    try:
        while True:
            try:
                yield loop.run(_next(stream))
            except StopAsyncIteration:
                return
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None and not loop.loop.is_closed():
            loop.run(close())


class blocking(Generic[P, T]):  # noqa: N801 - used as a decorator-like descriptor
    """`TetherClient.<method>` as a method of `SyncTetherClient` that blocks for its result."""

    def __init__(self, method: Callable[Concatenate[TetherClient, P], Coroutine[Any, Any, T]]):
        self.method = method
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, owner: None, kind: type[Any]) -> blocking[P, T]: ...
    @overload
    def __get__(self, owner: SyncTetherClient, kind: type[Any]) -> Callable[P, T]: ...
    def __get__(
        self, owner: SyncTetherClient | None, kind: type[Any]
    ) -> blocking[P, T] | Callable[P, T]:
        if owner is None:
            return self
        method, client, loop = self.method, owner.client, owner.loop

        def call(*args: P.args, **kwargs: P.kwargs) -> T:
            return loop.run(method(client, *args, **kwargs))

        call.__doc__ = method.__doc__
        return call


class blocking_iter(Generic[P, T]):  # noqa: N801 - used as a decorator-like descriptor
    """`TetherClient.<stream>` as a method of `SyncTetherClient` returning an iterator."""

    def __init__(self, method: Callable[Concatenate[TetherClient, P], AsyncIterator[T]]):
        self.method = method
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, owner: None, kind: type[Any]) -> blocking_iter[P, T]: ...
    @overload
    def __get__(self, owner: SyncTetherClient, kind: type[Any]) -> Callable[P, Iterator[T]]: ...
    def __get__(
        self, owner: SyncTetherClient | None, kind: type[Any]
    ) -> blocking_iter[P, T] | Callable[P, Iterator[T]]:
        if owner is None:
            return self
        method, client, loop = self.method, owner.client, owner.loop

        def call(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
            return _iterate(loop, method(client, *args, **kwargs))

        call.__doc__ = method.__doc__
        return call


async def _build(
    base_url: str, token: str | None, timeout: float, transport: httpx.AsyncBaseTransport | None
) -> TetherClient:
    # Built on the loop that will use it: httpx binds its connection pool to that loop.
    return TetherClient(base_url, token=token, timeout=timeout, transport=transport)


class SyncTetherClient:
    """`TetherClient`, blocking. Use it as a context manager, or call `close()`:

    with SyncTetherClient("http://127.0.0.1:8700") as tether:
        run = tether.start_run("What time is it in Lisbon?")
        for event in tether.typed_events(run.run_id):
            ...
    """

    def __init__(
        self,
        base_url: str = DEFAULT_API_URL,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.loop = _Loop()
        try:
            self.client = self.loop.run(_build(base_url, token, timeout, transport))
        except BaseException:
            self.loop.stop()
            raise

    def __enter__(self) -> SyncTetherClient:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections, then stop the private loop; calling it twice is harmless."""
        if self.loop.loop.is_closed():
            return
        try:
            self.loop.run(self.client.close())
        finally:
            self.loop.stop()

    # One line per method of `TetherClient` (whatever resource module of
    # `tether_client.resources` defines it): typed by the descriptor, so there is no second
    # signature to keep in step; a test checks none is missing.
    start_run = blocking(TetherClient.start_run)
    list_runs = blocking(TetherClient.list_runs)
    get_run = blocking(TetherClient.get_run)
    stop_run = blocking(TetherClient.stop_run)
    queue_message = blocking(TetherClient.queue_message)
    wait = blocking(TetherClient.wait)
    run = blocking(TetherClient.run)
    live = blocking_iter(TetherClient.live)
    events = blocking_iter(TetherClient.events)
    typed_events = blocking_iter(TetherClient.typed_events)
    create_thread = blocking(TetherClient.create_thread)
    send_message = blocking(TetherClient.send_message)
    get_thread = blocking(TetherClient.get_thread)
    list_threads = blocking(TetherClient.list_threads)
    delete_thread = blocking(TetherClient.delete_thread)
    chat = blocking_iter(TetherClient.chat)
    list_agents = blocking(TetherClient.list_agents)
    get_agent = blocking(TetherClient.get_agent)
    create_agent = blocking(TetherClient.create_agent)
    replace_agent = blocking(TetherClient.replace_agent)
    delete_agent = blocking(TetherClient.delete_agent)
    tools = blocking(TetherClient.tools)
    explain = blocking(TetherClient.explain)
    tool_catalog = blocking(TetherClient.tool_catalog)
    run_tool = blocking(TetherClient.run_tool)
    verify_audit = blocking(TetherClient.verify_audit)
    create_token = blocking(TetherClient.create_token)
    list_tokens = blocking(TetherClient.list_tokens)
    revoke_token = blocking(TetherClient.revoke_token)
    kill = blocking(TetherClient.kill)
    lift_kill = blocking(TetherClient.lift_kill)
    kills = blocking(TetherClient.kills)
    quota = blocking(TetherClient.quota)
    set_quota = blocking(TetherClient.set_quota)
    add_hook = blocking(TetherClient.add_hook)
    hooks = blocking(TetherClient.hooks)
    hook = blocking(TetherClient.hook)
    remove_hook = blocking(TetherClient.remove_hook)
    add_document = blocking(TetherClient.add_document)
    documents = blocking(TetherClient.documents)
    document = blocking(TetherClient.document)
    remove_document = blocking(TetherClient.remove_document)
    collections = blocking(TetherClient.collections)
    add_schedule = blocking(TetherClient.add_schedule)
    schedules = blocking(TetherClient.schedules)
    schedule = blocking(TetherClient.schedule)
    replace_schedule = blocking(TetherClient.replace_schedule)
    pause_schedule = blocking(TetherClient.pause_schedule)
    resume_schedule = blocking(TetherClient.resume_schedule)
    remove_schedule = blocking(TetherClient.remove_schedule)
    memories = blocking(TetherClient.memories)
    search_memory = blocking(TetherClient.search_memory)
    add_memory = blocking(TetherClient.add_memory)
    forget_memory = blocking(TetherClient.forget_memory)
    forget_memories = blocking(TetherClient.forget_memories)
