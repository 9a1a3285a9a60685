"""The five services, each with its own NATS user, run a whole run end to end on a bus
locked down by the generated configuration; the output-store keeps its chunks in the
JetStream object store there, which its user alone may touch."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from tether_common.bus import Bus
from tether_common.embedded import NatsServer
from tether_common.messages.outputs import QueryOutput
from tether_common.natsauth import generate_passwords, render_config, service_env, write_config
from tether_common.subjects import Subjects
from tether_common.supervisor import ServiceSpec, Supervisor
from tether_tools_runner.offload import upload

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def locked_passwords() -> dict[str, str]:
    """The generated passwords of the locked stack's users (filled in by `locked_stack`)."""
    return {}


@pytest.fixture(scope="module")
async def locked_stack(
    database_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    locked_passwords: dict[str, str],
) -> AsyncIterator[Supervisor]:
    base = tmp_path_factory.mktemp("locked-stack")
    prefix = f"l{uuid.uuid4().hex[:10]}"
    passwords = generate_passwords()
    locked_passwords.update(passwords)
    config = write_config(base / "nats.conf", render_config(Subjects(prefix), passwords))
    server = NatsServer(base / "nats", config_file=config).start()
    env = {
        "TETHER_NATS_URL": server.url,
        "TETHER_DATABASE_URL": database_url,
        "TETHER_SUBJECT_PREFIX": prefix,
        "TETHER_OPERATOR_TOKEN": "locked-operator-token",
        "TETHER_RUNNER_WORKSPACE": str(base / "workspace"),
        "TETHER_DB_POOL_SIZE": "5",
        "TETHER_OUTPUTS_BACKEND": "jetstream",
    }
    (base / "workspace").mkdir()

    def own_credentials(spec: ServiceSpec) -> dict[str, str]:
        return service_env(spec.name, passwords[spec.name])

    logs = base / "logs"
    supervisor = Supervisor(env, restart=False, log_dir=logs, env_for=own_credentials)
    try:
        await supervisor.start()
        await supervisor.wait_ready(timeout=90)
        yield supervisor
    except BaseException:
        print_logs(logs)
        raise
    finally:
        await supervisor.stop()
        server.stop()


def print_logs(logs: Path) -> None:
    for log_file in sorted(logs.glob("*.log")):
        print(f"--- {log_file.name}\n{log_file.read_text()[-4000:]}")  # noqa: T201


async def wait_for_end(client: httpx.AsyncClient, url: str) -> dict[str, object]:
    """Follow the run's event stream until `run.end`, then read the run."""
    async with client.stream("GET", f"{url}/events") as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("event:") and "run.end" in line:
                break
    run: dict[str, object] = (await client.get(url)).json()
    return run


async def test_a_run_completes_on_the_locked_down_bus(locked_stack: Supervisor) -> None:
    brain = locked_stack.child("brain").url
    # The operator token of the stack's environment: every brain route asks for one.
    token = locked_stack.env["TETHER_OPERATOR_TOKEN"]
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=60, headers=headers) as client:
        created = await client.post(
            f"{brain}/v1/runs", json={"prompt": "what time is it in Tokyo?"}
        )
        assert created.status_code == 201, created.text
        run = await wait_for_end(client, f"{brain}/v1/runs/{created.json()['run_id']}")
    assert run["status"] == "completed", run
    assert "Asia/Tokyo" in str(run["answer"])
    assert not any(
        "permissions violation" in log.read_text().lower()
        for log in (locked_stack.log_dir or Path()).glob("*.log")
    )


async def test_a_large_result_is_offloaded_into_the_object_store(
    locked_stack: Supervisor, locked_passwords: dict[str, str], database_url: str
) -> None:
    """What the tools-runner does with a big result, as the tools-runner's own user."""
    subjects = Subjects(locked_stack.env["TETHER_SUBJECT_PREFIX"])
    bus = await Bus.connect(
        locked_stack.env["TETHER_NATS_URL"],
        service="tools-runner",
        subjects=subjects,
        user="tools-runner",
        password=locked_passwords["tools-runner"],
    )
    try:
        data = b"".join(f"line {i} of a long log\n".encode() for i in range(40_000))
        stored = await upload(bus, "run-locked", data)
        assert stored.size == len(data)
        page = await bus.request(
            subjects.output_query,
            QueryOutput(ref=stored.ref, run_id="run-locked", mode="grep", pattern="line 39999 "),
        )
        assert "line 39999 of a long log" in page.content
    finally:
        await bus.close()
    pg = await asyncpg.connect(database_url.replace("+asyncpg", "", 1))
    try:
        kept_in_rows = await pg.fetchval(
            "SELECT count(*) FROM outputs o JOIN output_chunks c "
            "ON c.digest = ANY(o.chunk_digests) WHERE o.ref = $1 AND c.data IS NOT NULL",
            stored.ref,
        )
    finally:
        await pg.close()
    assert kept_in_rows == 0
