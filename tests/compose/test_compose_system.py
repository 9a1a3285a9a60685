"""The system as docker-compose.yml ships it, started for real (`make compose-test`): every
image built, `docker compose up` of the core (NATS locked with the generated permissions,
PostgreSQL, the five services, the runner under the shipped seccomp profile), driven only
through the published ports, then `down -v`. The steps run in order on one system:

1. each image imports every module of its service (every dependency is in the image);
2. a shell call asks, is approved through the approvals API and applies its staged diff;
3. a large result is stored and read back by the model with `retrieve_output`;
4. a completion through the OpenAI face;
5. a call through the MCP face;
6. the brain container is killed mid-run and the run is taken over;
7. `down -v` leaves no container or volume.

What differs from a deployment is said here: fresh secrets in a generated env file, and
the gateway's scripts folder mounted (an override file) so a run can follow a script.
Where no registry is reachable (`TETHER_COMPOSE_BASE_ENV`, set by the Makefile), the base
images are the local ones deploy/docker/base-images.sh makes."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import TextContent
from testcontainers.compose import DockerCompose

from tether_client import TetherClient
from tether_client.server.supervisor import SERVICES
from tether_common.errors import TetherError
from tether_common.testing import Turn, call, say, until, write_script

pytestmark = [pytest.mark.compose, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "tether-compose-test"
BRAIN, APPROVALS = "http://127.0.0.1:8700", "http://127.0.0.1:8701"
RUN_WAIT_S = 120.0


class System:
    """The running compose project and what the test needs to reach it."""

    def __init__(self, compose: DockerCompose, token: str, scripts: Path) -> None:
        self.compose = compose
        self.token = token
        self.scripts = scripts

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self) -> TetherClient:
        return TetherClient(BRAIN, token=self.token, timeout=60)

    def exec(self, service: str, *command: str) -> str:
        out, err, code = self.compose.exec_in_container(list(command), service_name=service)
        assert code == 0, (service, command, out, err)
        return out


def env_file(folder: Path) -> Path:
    """.env.example with every change-me replaced by a fresh secret, plus the base images
    and build CA named by the environment (the Makefile's), as an operator fills .env."""
    # As .env.example says: hex (a URL's password; never read by nats-server's config
    # parser as a date or a number, as some base64 texts are), 32 bytes (the runner's key).
    env = {k: secrets.token_hex(32) if v == "change-me" else v for k, v in example().items()}
    if base := os.environ.get("TETHER_COMPOSE_BASE_ENV"):
        env |= read_env(ROOT / base)
    if bundle := os.environ.get("TETHER_BUILD_CA_BUNDLE"):
        env["TETHER_BUILD_CA_BUNDLE"] = bundle
    path = folder / "compose.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return path


def example() -> dict[str, str]:
    return read_env(ROOT / ".env.example")


def scripts_override(folder: Path, scripts: Path) -> Path:
    """The one addition to the shipped file: the gateway replays scripts from `scripts`."""
    override = {
        "services": {
            "gateway": {
                "environment": {"TETHER_GATEWAY_SCRIPTS_DIR": "/scripts"},
                "volumes": [f"{scripts}:/scripts:ro"],
            }
        }
    }
    path = folder / "compose.scripts.yml"
    path.write_text(json.dumps(override))
    return path


def read_env(path: Path) -> dict[str, str]:
    """An env file's assignments (comments and blank lines skipped)."""
    lines = path.read_text().splitlines()
    pairs = (line.partition("=") for line in lines if not line.startswith("#"))
    return {name: value for name, sep, value in pairs if sep}


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    folder = tmp_path_factory.mktemp("compose")
    scripts = folder / "scripts"
    scripts.mkdir(mode=0o755)
    scripts.chmod(0o755)  # the gateway's user reads it through the bind mount
    env = env_file(folder)
    compose = DockerCompose(
        ROOT,
        compose_file_name=["docker-compose.yml", str(scripts_override(folder, scripts))],
        env_file=str(env),
        build=True,
        wait=True,
    )
    previous = os.environ.get("COMPOSE_PROJECT_NAME")
    os.environ["COMPOSE_PROJECT_NAME"] = PROJECT  # never the project a developer runs
    try:
        started = time.monotonic()
        with compose:
            print(f"compose: built and up in {time.monotonic() - started:.0f} s")  # noqa: T201
            yield System(compose, read_env(env)["TETHER_OPERATOR_TOKEN"], scripts)
    finally:
        if previous is None:
            os.environ.pop("COMPOSE_PROJECT_NAME", None)
        else:
            os.environ["COMPOSE_PROJECT_NAME"] = previous


async def start(system: System, turns: list[Turn], prompt: str) -> tuple[str, str]:
    """A run of the default agent following `turns`; returns its id and script name."""
    script = write_script(system.scripts, turns)
    (system.scripts / f"{script}.json").chmod(0o644)
    async with system.client() as client:
        accepted = await client.start_run(
            prompt, provider="scripted", model=script, allow_shell=True
        )
    return accepted.run_id, script


async def until_event(system: System, run_id: str, kind: str, after: int = 0) -> dict[str, Any]:
    """The run's first event of `kind` after seq `after` (its data and seq)."""
    async with system.client() as client:
        async for event in client.events(run_id, after=after):
            if event.kind == kind:
                return {"seq": event.seq, **event.data}
            assert event.kind != "run.end", (kind, event.data)
    raise AssertionError(f"the event stream of {run_id} ended without {kind}")


async def approve(system: System, approval_id: str) -> dict[str, Any]:
    """The card as the approvals API shows it, then approved once through that API."""
    async with httpx.AsyncClient(base_url=APPROVALS, headers=system.auth, timeout=30) as http:
        card = (await http.get(f"/v1/approvals/{approval_id}")).raise_for_status().json()
        decided = await http.post(
            f"/v1/approvals/{approval_id}/decision", json={"decision": "allow_once"}
        )
        assert decided.status_code == 200, decided.text
    return dict(card)


async def settle(system: System, run_id: str, after: int) -> list[dict[str, Any]]:
    """Follows the run to its end, approving each call that asks after seq `after` (the
    cards before it are decided already); all its events."""
    seen: list[dict[str, Any]] = []
    async with system.client() as client:
        async for event in client.events(run_id):
            seen.append({"kind": event.kind, **event.data})
            if event.kind == "tool.approval_needed" and event.seq > after:
                await approve(system, event.data["approval_id"])
    return seen


async def finished(system: System, run_id: str) -> tuple[str, str | None]:
    async with system.client() as client:
        run = await client.get_run(run_id)
    return run.status, run.answer


@pytest.mark.parametrize("spec", SERVICES, ids=[s.name for s in SERVICES])
def test_step1_each_image_imports_every_module_of_its_service(system: System, spec: Any) -> None:
    walk = (
        "import importlib, pkgutil, sys\n"
        f"package = importlib.import_module({spec.module!r})\n"
        "names = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + '.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names))\n"
    )
    imported = system.exec(spec.name, "python", "-c", walk)
    assert int(imported) > 3, imported


async def test_step2_a_shell_call_asks_and_applies_its_staged_diff(system: System) -> None:
    command = "mkdir -p step2 && printf 'DEBUG = 0\\n' > step2/app.cfg && echo made > step2/new"
    run_id, _ = await start(system, [[call("shell", command=command)], say("applied")], "edit")
    asked = await until_event(system, run_id, "tool.approval_needed")
    assert "step2" not in system.exec("tools-runner", "ls", "-A", "/workspace").split()
    card = await approve(system, asked["approval_id"])
    changes = {e["path"]: e["change"] for e in card["changes"]["entries"]}
    created = {"step2": "created", "step2/app.cfg": "created", "step2/new": "created"}
    assert changes == created, card["changes"]
    await settle(system, run_id, after=asked["seq"])
    assert await finished(system, run_id) == ("completed", "applied")
    assert system.exec("tools-runner", "cat", "/workspace/step2/new") == "made\n"
    assert system.exec("tools-runner", "cat", "/workspace/step2/app.cfg") == "DEBUG = 0\n"


async def test_step3_a_large_result_is_read_back_with_retrieve_output(system: System) -> None:
    """The ref is known only once the big result exists: the run parks on a write that
    asks, the script's next turn is written with the ref meanwhile (the scripted provider
    reads a script again when it changed), then the write is approved."""
    turns: list[Turn] = [
        [call("shell", command="seq 1 3000")],  # ~14 KB: stored, not shown
        [call("file_write", path="step3.txt", content="parked\n")],
        say("placeholder"),
    ]
    run_id, script = await start(system, turns, "count to three thousand")
    seq = 0
    while True:
        event = await until_event(system, run_id, "tool.approval_needed", after=seq)
        card = await approve_if_shell(system, event)
        if card is None:
            break  # the file_write: parked, not yet approved
        seq = event["seq"]
    stored = await until_event(system, run_id, "tool.result")
    ref = stored["output_ref"]
    assert ref is not None, stored
    assert ref.startswith("out_"), stored
    # Line 0 is the exit code line, so line n is the number n.
    turns[2] = [call("retrieve_output", ref=ref, offset=1500, limit=3)]
    turns.append(say("read back"))
    path = system.scripts / f"{script}.json"
    path.write_text(json.dumps({"turns": turns}))
    await approve(system, event["approval_id"])
    events = await settle(system, run_id, after=event["seq"])
    assert await finished(system, run_id) == ("completed", "read back")
    (read,) = [e for e in events if e["kind"] == "tool.result" and e["name"] == "retrieve_output"]
    assert read["ok"] is True, read
    assert "1500\n1501\n1502" in read["content"], read["content"]


async def approve_if_shell(system: System, event: dict[str, Any]) -> dict[str, Any] | None:
    """Approves a card for the shell call (reads may ask too); None for anything else."""
    async with httpx.AsyncClient(base_url=APPROVALS, headers=system.auth, timeout=30) as http:
        card = (await http.get(f"/v1/approvals/{event['approval_id']}")).raise_for_status()
    if card.json()["tool"] != "shell":
        return None
    return await approve(system, event["approval_id"])


async def test_step4_a_completion_through_the_openai_face(system: System) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{BRAIN}/v1", api_key=system.token, max_retries=0, timeout=RUN_WAIT_S
    ) as face:
        completion = await face.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "what time is it in Tokyo?"}]
        )
    answer = completion.choices[0].message.content or ""
    assert "rules planner" in answer, answer  # the shipped default provider answered
    assert "current_time" in answer, answer
    note = (completion.model_extra or {})["tether"]
    assert (note["event"], note["status"]) == ("run.end", "completed"), note


async def test_step5_a_call_through_the_mcp_face(system: System) -> None:
    http = create_mcp_http_client(headers=system.auth)
    async with (
        http,
        streamable_http_client(f"{BRAIN}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert "default" in tools, tools
        result = await session.call_tool("default", {"task": "what time is it in UTC?"})
    text = "".join(b.text for b in result.content if isinstance(b, TextContent))
    assert not result.is_error, text
    assert "current_time" in text, text


async def test_step6_a_killed_brain_container_s_run_is_taken_over(system: System) -> None:
    """SIGKILL to the brain's process (a crash, not `docker stop`): the container restarts
    (restart: unless-stopped), and the new brain takes the leased run over once its lease
    has run out, replaying the turn the dead one was waiting for."""
    turns: list[Turn] = [[{"pause_s": 6.0}, *say("survived")]]
    run_id, _ = await start(system, turns, "outlive the brain")
    await until_event(system, run_id, "run.start")
    await asyncio.sleep(1.0)  # inside the model turn, whose lease the brain holds
    brain = system.compose.get_container("brain").ID
    assert brain is not None
    before = inspect(brain, "{{.RestartCount}}")
    os.kill(int(inspect(brain, "{{.State.Pid}}")), signal.SIGKILL)
    await until(
        lambda: status_or_none(system, run_id),
        done=lambda status: status in {"completed", "failed", "stopped"},
        timeout=RUN_WAIT_S,
        every=1.0,
        what="the run taken over and ended",
    )
    assert int(inspect(brain, "{{.RestartCount}}")) == int(before) + 1
    assert await finished(system, run_id) == ("completed", "survived")
    logs, _ = system.compose.get_logs("brain")
    assert f"run {run_id} taken over" in logs


def inspect(container: str, template: str) -> str:
    done = subprocess.run(
        ["docker", "inspect", "-f", template, container],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


async def status_or_none(system: System, run_id: str) -> str | None:
    """The run's status, or None while the brain is down or not yet ready."""
    try:
        return (await finished(system, run_id))[0]
    except (httpx.TransportError, TetherError):
        return None


def test_step7_down_removes_every_container_and_volume(system: System) -> None:
    system.compose.stop(down=True)
    left = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert left.stdout.strip() == ""
    volumes = subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert volumes.stdout.strip() == ""
