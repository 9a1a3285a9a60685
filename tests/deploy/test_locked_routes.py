"""Every served route on the bus as shipped: a nats-server locked by the generated
configuration (`tether up`'s, compose's, Kubernetes'), each route served by every user
whose role serves it and called by a user whose role calls it, with a handler slower than
several heartbeats. The answer must arrive and nats-server must log no violation: a
server that may send fewer messages than its route needs (a heartbeat using the one reply
a unary grant allows) loses the answer while the effect stands (issue 27).

A cancellable route (`Route.cancellable`) is cut short by its caller going away, on the
same locked bus; and no user that does not call it may (issue 30): its notice is refused
by nats-server, even naming the real request's inbox, and the answer still arrives."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tether_client.server.embedded import NatsServer
from tether_client.server.natsauth import (
    ACCOUNT,
    ROLES,
    generate_passwords,
    render_config,
    write_config,
)
from tether_common.bus import Bus
from tether_common.errors import TetherError
from tether_common.messages.base import encode
from tether_common.messages.cancel import CancelNotice
from tether_common.messages.profiles import ModelProfile
from tether_common.subjects import Route, Subjects

PREFIX = "lr"
BEAT_S = 0.1
SLOW_S = 6 * BEAT_S  # several heartbeats before the answer
DONE = "route_table_done"  # the code of the handler's answer: a structured error reply

# A valid request for each route, by its subject without the prefix. A route added to
# `Subjects.routes()` without an example here fails `test_every_route_has_an_example`.
EXAMPLES: dict[str, dict[str, Any]] = {
    "runs.start": {"prompt": "hi"},
    "runs.get": {"run_id": "run_1"},
    "runs.list": {},
    "runs.stop": {"run_id": "run_1"},
    "runs.message": {"run_id": "run_1", "text": "more"},
    "runs.follow": {"run_id": "run_1"},
    "threads.create": {},
    "threads.message": {"thread_id": "thr_1", "text": "hi"},
    "threads.get": {"thread_id": "thr_1"},
    "threads.list": {},
    "threads.delete": {"thread_id": "thr_1"},
    "gateway.profiles.get": {"provider": "rules"},
    "gateway.profiles.list": {},
    "gateway.profiles.put": {"profile": ModelProfile(provider="rules", model="m").model_dump()},
    "gateway.profiles.probe": {"provider": "rules"},
    "tools.catalog": {},
    "tools.execute": {"run_id": "run_1", "call_id": "c1", "name": "calculate", "args": {}},
    "tools.stage": {"run_id": "run_1", "call_id": "c1", "name": "file_write", "args": {}},
    "tools.servers.add": {
        "spec": {"name": "crm", "url": "https://crm.example.com/mcp"},
        "tenant": "acme",
        "added_by": "alice",
    },
    "tools.servers.list": {"tenant": "acme"},
    "tools.servers.remove": {"server_id": "srv_1", "tenant": "acme"},
    "approvals.create": {
        "run_id": "run_1",
        "step": 1,
        "tool": "shell",
        "args": {},
        "reason": "asks",
        "action_digest": "0" * 64,
    },
    "approvals.list": {},
    "approvals.decide": {"approval_id": "apr_1", "decision": "deny", "token": "t"},
    "approvals.consume": {"approval_id": "apr_1", "action_digest": "0" * 64},
    "approvals.presence": {},
    "approvals.withdraw": {"approval_id": "apr_1", "run_id": "run_1"},
    "approvals.watch": {"token": "t"},
    "outputs.put": {"run_id": "run_1", "content": "x"},
    "outputs.get": {"ref": "out_1", "run_id": "run_1"},
    "outputs.begin": {"run_id": "run_1", "size": 1, "sha256": "0" * 64},
    "outputs.chunk": {"upload_id": "up_1", "seq": 0, "data": "eA=="},
    "outputs.commit": {"upload_id": "up_1", "run_id": "run_1"},
    "outputs.query": {"ref": "out_1", "run_id": "run_1"},
    "identity.verify": {"token": "t"},
    "hooks.svc": {"hook": "h", "point": "on_run_end", "tenant": "t", "run_id": "run_1"},
    "gateway.generate.rules": {
        "run_id": "run_1",
        "provider": "rules",
        "messages": [{"role": "user", "content": "hi"}],
    },
}


def all_routes(subjects: Subjects) -> list[Route[BaseModel, BaseModel]]:
    found = [*subjects.routes(), subjects.generate("rules"), subjects.hook("svc")]
    return found  # type: ignore[return-value]


def short(route: Route[Any, Any]) -> str:
    return route.subject.removeprefix(f"{PREFIX}.")


def callers_of(route: Route[Any, Any]) -> list[str]:
    """A route's callers, those in Tether's account first."""
    return sorted(
        (u for u, r in ROLES.items() if route.queue in r.calls),
        key=lambda u: ROLES[u].account != ACCOUNT,
    )


def cases() -> Iterator[tuple[str, str, str]]:
    """(route, serving user, calling user) for every user that serves each route."""
    for route in all_routes(Subjects(PREFIX)):
        # A caller in Tether's account where there is one, else the client account's.
        for server, role in ROLES.items():
            if route.queue in role.serves:
                yield short(route), server, callers_of(route)[0]


def route_named(name: str) -> Route[BaseModel, BaseModel]:
    return next(r for r in all_routes(Subjects(PREFIX)) if short(r) == name)


def cancellable_cases() -> list[tuple[str, str, str]]:
    return [case for case in cases() if route_named(case[0]).cancellable]


def intruder_cases() -> list[tuple[str, str]]:
    """(cancellable route, user) for every user that does not call the route in
    Tether's account: the route's servers, other services, the client, a notifier."""
    found = []
    for route in all_routes(Subjects(PREFIX)):
        if route.cancellable:
            callers = {u for u in callers_of(route) if ROLES[u].account == ACCOUNT}
            found += [(short(route), user) for user in ROLES if user not in callers]
    return found


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServer, dict[str, str]]]:
    base = tmp_path_factory.mktemp("locked-routes")
    passwords = generate_passwords()
    config = write_config(base / "nats.conf", render_config(Subjects(PREFIX), passwords))
    server = NatsServer(base / "nats", config_file=config).start()
    try:
        yield server, passwords
    finally:
        server.stop()


@pytest.fixture
async def connect(
    locked: tuple[NatsServer, dict[str, str]],
) -> AsyncIterator[Any]:
    server, passwords = locked
    opened: list[Bus] = []

    async def open_as(user: str) -> Bus:
        bus = await Bus.connect(
            server.url, service=user, subjects=Subjects(PREFIX), user=user, password=passwords[user]
        )
        opened.append(bus)
        return bus

    try:
        yield open_as
    finally:
        for bus in opened:
            await bus.close()


@pytest.fixture
def new_log(locked: tuple[NatsServer, dict[str, str]]) -> Any:
    """What nats-server logs from the start of the test on (the server is the module's)."""
    path = Path(locked[0].data_dir) / "nats-server.log"
    start = path.stat().st_size if path.exists() else 0

    def read() -> str:
        with path.open("rb") as log:
            log.seek(start)
            return log.read().decode(errors="replace")

    return read


def test_every_route_has_an_example() -> None:
    assert {short(r) for r in all_routes(Subjects(PREFIX))} == set(EXAMPLES)


def test_the_gateway_generation_is_the_one_cancellable_route() -> None:
    """Tool calls stay uncancellable: one cut short could leave its effect half made."""
    assert [short(r) for r in all_routes(Subjects(PREFIX)) if r.cancellable] == [
        "gateway.generate.rules"
    ]
    assert intruder_cases()  # the tests below have something to try


@pytest.mark.parametrize(("name", "server_user", "caller_user"), list(cases()))
async def test_a_slow_answer_reaches_its_caller_on_the_locked_bus(
    connect: Any,
    new_log: Any,
    name: str,
    server_user: str,
    caller_user: str,
) -> None:
    route = route_named(name)
    server, caller = await connect(server_user), await connect(caller_user)
    request = route.request.model_validate(EXAMPLES[name])

    async def slow(_: BaseModel) -> BaseModel:
        await asyncio.sleep(SLOW_S)
        raise TetherError("answered", code=DONE)

    async def slow_stream(body: BaseModel) -> AsyncIterator[BaseModel]:
        yield await slow(body)  # an async generator that answers with its error

    async def ask() -> None:
        if route.streamed:
            await server.serve_stream(route, slow_stream)
            async for _ in caller.stream(route, request, is_terminal=lambda _: False, timeout=10):
                pass
            return
        await server.serve(route, slow)
        if route.beats:
            await caller.request_watched(route, request, timeout=10, heartbeat_s=BEAT_S)
        else:
            await caller.request(route, request, timeout=10)

    with pytest.raises(TetherError) as answer:
        await ask()
    assert answer.value.code == DONE
    log = new_log()
    assert "Violation" not in log, log[-2000:]


class Held:
    """A streamed handler that holds its request until released (or cancelled)."""

    def __init__(self) -> None:
        self.began, self.ended, self.release = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.outcome = "running"

    async def handle(self, _: BaseModel) -> AsyncIterator[BaseModel]:
        yield await self._hold()  # an async generator that answers with its error

    async def _hold(self) -> BaseModel:
        self.began.set()
        try:
            await asyncio.wait_for(self.release.wait(), 60)
            self.outcome = "finished"
        except asyncio.CancelledError:
            self.outcome = "cancelled"
            raise
        finally:
            self.ended.set()
        raise TetherError("answered", code=DONE)


@pytest.mark.parametrize(("name", "server_user", "caller_user"), cancellable_cases())
async def test_a_caller_gone_cancels_its_handler_on_the_locked_bus(
    connect: Any, new_log: Any, name: str, server_user: str, caller_user: str
) -> None:
    route = route_named(name)
    server, caller = await connect(server_user), await connect(caller_user)
    held = Held()
    await server.serve_stream(route, held.handle)
    request = route.request.model_validate(EXAMPLES[name])

    async def read() -> None:
        async for _ in caller.stream(route, request, is_terminal=lambda _: False, timeout=60):
            pass

    reading = asyncio.create_task(read())
    await held.began.wait()
    reading.cancel()
    await asyncio.gather(reading, return_exceptions=True)
    await asyncio.wait_for(held.ended.wait(), 5)
    assert held.outcome == "cancelled"
    log = new_log()
    assert "Violation" not in log, log[-2000:]


@pytest.mark.parametrize(("name", "intruder_user"), intruder_cases())
async def test_no_other_user_may_cancel_a_callers_request(
    connect: Any, new_log: Any, name: str, intruder_user: str
) -> None:
    """The intruder is handed the real request's inbox (it could not learn it: it may
    not subscribe below the caller's inbox prefix); its notice is still refused."""
    route = route_named(name)
    server_user = next(u for u, r in ROLES.items() if route.queue in r.serves)
    server, caller = await connect(server_user), await connect(callers_of(route)[0])
    intruder = server if intruder_user == server_user else await connect(intruder_user)
    held = Held()
    await server.serve_stream(route, held.handle)
    inbox = caller._nc.new_inbox()
    replies = await caller.subscribe_raw(inbox)
    request = route.request.model_validate(EXAMPLES[name])
    await caller.publish_raw(route.subject, encode(request), reply=inbox)
    await held.began.wait()

    notices = intruder.subjects.cancel_notices(route.queue)
    await intruder.publish_raw(notices, encode(CancelNotice(inbox=inbox)))
    await intruder.settle()  # nats-server has refused (or would have routed) it by now
    await server.settle()  # and what it routed to the server has been read
    assert not held.ended.is_set()
    held.release.set()
    answer = await replies.next_msg(timeout=5)
    assert DONE.encode() in answer.data
    assert held.outcome == "finished"
    log = new_log()
    refused = f'user:{intruder_user}" - Publish Violation - Subject "{notices}"'
    assert refused in log, log[-2000:]
