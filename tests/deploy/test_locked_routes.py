"""Every served route on the bus as shipped: a nats-server locked by the generated
configuration (`tether up`'s, compose's, Kubernetes'), each route served by every user
whose role serves it and called by a user whose role calls it, with a handler slower than
several heartbeats. The answer must arrive and nats-server must log no violation: a
server that may send fewer messages than its route needs (a heartbeat using the one reply
a unary grant allows) loses the answer while the effect stands (issue 27)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tether_common.bus import Bus
from tether_common.embedded import NatsServer
from tether_common.errors import TetherError
from tether_common.messages.profiles import ModelProfile
from tether_common.natsauth import (
    ACCOUNT,
    ROLES,
    generate_passwords,
    render_config,
    write_config,
)
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
    "gateway.generate.rules": {
        "run_id": "run_1",
        "provider": "rules",
        "messages": [{"role": "user", "content": "hi"}],
    },
}


def all_routes(subjects: Subjects) -> list[Route[BaseModel, BaseModel]]:
    return [*subjects.routes(), subjects.generate("rules")]  # type: ignore[list-item]


def short(route: Route[Any, Any]) -> str:
    return route.subject.removeprefix(f"{PREFIX}.")


def cases() -> Iterator[tuple[str, str, str]]:
    """(route, serving user, calling user) for every user that serves each route."""
    for route in all_routes(Subjects(PREFIX)):
        # A caller in Tether's account where there is one, else the client account's.
        callers = sorted(
            (u for u, r in ROLES.items() if route.queue in r.calls),
            key=lambda u: ROLES[u].account != ACCOUNT,
        )
        for server, role in ROLES.items():
            if route.queue in role.serves:
                yield short(route), server, callers[0]


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


def test_every_route_has_an_example() -> None:
    assert {short(r) for r in all_routes(Subjects(PREFIX))} == set(EXAMPLES)


@pytest.mark.parametrize(("name", "server_user", "caller_user"), list(cases()))
async def test_a_slow_answer_reaches_its_caller_on_the_locked_bus(
    connect: Any,
    locked: tuple[NatsServer, dict[str, str]],
    name: str,
    server_user: str,
    caller_user: str,
) -> None:
    route = next(r for r in all_routes(Subjects(PREFIX)) if short(r) == name)
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
    log = (Path(locked[0].data_dir) / "nats-server.log").read_text()
    assert "Violation" not in log, log[-2000:]
