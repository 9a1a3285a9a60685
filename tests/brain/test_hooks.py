"""Lifecycle hooks through the real services (issue 32): a NATS-service hook answered by a
test service on the `hooks` bus user's credentials rewrites a call, which is gated again
and audited twice; a hook that times out fails closed (and one `fail_open` goes on,
counted); an HTTPS hook over TLS (a self-signed certificate the brain is told to trust,
`TETHER_BRAIN_HOOKS_CA_FILE`, on a loopback host the deployment names) is signed with
the secret `/v1/hooks` answered once; the built-in redaction hook keeps a planted secret
out of the model's request (the scripted provider refuses a request holding it), the
events and the run's view, while the output-store keeps the original for an admin only;
`/v1/hooks` refuses URLs the guard refuses. The rules of each point run in process in
test_hooks_rules.py; the transports in test_hooks_calling.py."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from hook_receiver import Endpoint, Receiver, serve_tls
from shipped import locked_bus
from tether_client import TetherClient
from tether_client.cli import main
from tether_client.server.supervisor import Supervisor
from tether_common import audit
from tether_common.bus import Bus
from tether_common.errors import TetherError
from tether_common.messages.hooks import AddHook, HookReply, HookRequest
from tether_common.signing import verify
from tether_common.subjects import Subjects
from tether_common.testing import RunScript, call, event_data, say

pytestmark = pytest.mark.e2e

TOKEN = "test-operator-token"  # tests/conftest.py: an admin of tenant `default`
SECRET = "sk-proj-" + "Zq4" * 12  # planted in a workspace file
NOTES, OTHER = "the notes", "the other file"


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="tether-hooks-"))
    try:
        root.chmod(0o777)
        files = {
            "notes.txt": NOTES,
            "other.txt": OTHER,
            "config.txt": f"region = eu\nOPENAI_API_KEY={SECRET}\n",
        }
        for name, text in files.items():
            (root / name).write_text(text)
            (root / name).chmod(0o666)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    with serve_tls(tmp_path_factory.mktemp("hook-tls"), Receiver()) as found:
        yield found


@pytest.fixture(scope="module")
def stack_extra_env(workspace: Path, endpoint: Endpoint) -> dict[str, str]:
    return {
        "TETHER_RUNNER_WORKSPACE": str(workspace),
        "TETHER_BRAIN_WORKSPACE": str(workspace),
        "TETHER_BRAIN_HOOKS_PRIVATE_HOSTS": json.dumps(["127.0.0.1"]),
        "TETHER_BRAIN_HOOKS_CA_FILE": str(endpoint.ca_file),
        "TETHER_BRAIN_HOOKS_REFRESH_S": "0",  # a hook added is asked by the next call
    }


@pytest.fixture(scope="module")
async def hook_service(stack: Supervisor) -> AsyncIterator[list[HookRequest]]:
    """The tenant's hook services, connected as the bus's `hooks` user: `rewriter`
    rewrites `rm -rf build` and reads of notes.txt, `slow` answers after 3 s."""
    bus = locked_bus(stack)
    service = await Bus.connect(
        bus.url,
        service="hook-service",
        subjects=Subjects(stack.env["TETHER_SUBJECT_PREFIX"]),
        user="hooks",
        password=bus.passwords["hooks"],
    )
    seen: list[HookRequest] = []

    async def rewriter(request: HookRequest) -> HookReply:
        seen.append(request)
        args = request.call.arguments if request.call else {}
        if args == {"command": "rm -rf build"}:
            return HookReply(action="rewrite", arguments={"command": "rm -rf build/tmp"})
        if args.get("path") == "notes.txt":
            return HookReply(action="rewrite", arguments={"path": "other.txt"})
        if args.get("path") == "widen.txt":
            return HookReply(action="rewrite", arguments={"path": "../../etc/passwd"})
        return HookReply()

    async def slow(request: HookRequest) -> HookReply:
        await asyncio.sleep(3)
        return HookReply(action="deny", reason="too late to matter")

    try:
        await service.serve(service.subjects.hook("rewriter"), rewriter)
        await service.serve(service.subjects.hook("slow"), slow)
        yield seen
    finally:
        await service.close()


@pytest.fixture
async def client(stack: Supervisor) -> AsyncIterator[TetherClient]:
    async with TetherClient(stack.child("brain").url, token=TOKEN) as found:
        yield found


class Hooked:
    """Hooks added for one test and removed after it (the module's runs share a tenant)."""

    def __init__(self, client: TetherClient) -> None:
        self.client = client
        self.names: list[str] = []

    async def add(self, **spec: Any) -> str | None:
        created = await self.client.add_hook(AddHook.model_validate(spec))
        self.names.append(created.name)
        return created.secret


@pytest.fixture
async def hooked(client: TetherClient) -> AsyncIterator[Hooked]:
    found = Hooked(client)
    try:
        yield found
    finally:
        for name in found.names:
            await client.remove_hook(name)


async def audit_of(database_url: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        rows = await conn.fetch(
            "SELECT event, data::text AS data FROM audit_records WHERE run_id = $1 ORDER BY seq",
            run_id,
        )
    finally:
        await conn.close()
    return [(r["event"], json.loads(r["data"])) for r in rows]


def result_of(events: list[Any], sent: dict[str, Any]) -> dict[str, Any]:
    (found,) = [r for r in event_data(events, "tool.result") if r["call_id"] == sent["id"]]
    return found


async def hook_failures(stack: Supervisor, reason: str) -> float:
    async with httpx.AsyncClient(base_url=stack.child("brain").url, timeout=10) as http:
        text = (await http.get("/metrics")).text
    pattern = rf'^tether_hooks_failures_total\{{[^}}]*reason="{reason}"[^}}]*\}} (\S+)$'
    return sum(float(m.group(1)) for m in re.finditer(pattern, text, re.M))


async def test_a_nats_hook_rewrites_a_call_that_is_gated_again_and_audited_twice(
    run_script: RunScript,
    hooked: Hooked,
    hook_service: list[HookRequest],
    database_url: str,
) -> None:
    await hooked.add(name="rewriter", point="before_tool", transport="nats", target="rewriter")
    shell, read = call("shell", command="rm -rf build"), call("file_read", path="notes.txt")
    run, events = await run_script([[shell], [read], say("done")], interactive=True)
    assert run.status == "completed", run
    # The service was asked with the original call, over the bus, by the run's tenant.
    asked = {r.call.id: r for r in hook_service if r.call is not None}
    assert asked[shell["id"]].call.arguments == {"command": "rm -rf build"}  # type: ignore[union-attr]
    assert asked[shell["id"]].tenant == "default"
    trail = await audit_of(database_url, run.run_id)
    shells = [
        (e, d) for e, d in trail if d.get("tool") == "shell" and e.startswith(("gate", "hook"))
    ]
    original, rewritten = {"command": "rm -rf build"}, {"command": "rm -rf build/tmp"}
    assert [e for e, _ in shells][:3] == ["gate.decision", "hook.rewrote", "gate.decision"]
    assert shells[0][1]["args"] == audit.redact(original)
    assert (shells[1][1]["before"], shells[1][1]["after"]) == (
        audit.redact(original),
        audit.redact(rewritten),
    )
    assert shells[2][1]["args"] == audit.redact(rewritten)  # the rewrite met every gate
    # A rewritten read runs as rewritten: the model reads the other file.
    assert result_of(events, read)["content"].strip().endswith(OTHER)


async def test_a_rewrite_into_a_refused_call_is_refused(
    run_script: RunScript, hooked: Hooked, hook_service: list[HookRequest]
) -> None:
    await hooked.add(name="rewriter", point="before_tool", transport="nats", target="rewriter")
    read = call("file_read", path="widen.txt")
    _run, events = await run_script([[read], say("done")])
    found = result_of(events, read)
    assert not found["ok"]
    assert found["error_code"] == "path_denied", found


async def test_a_hook_that_times_out_fails_closed_and_one_that_fails_open_goes_on(
    stack: Supervisor,
    run_script: RunScript,
    hooked: Hooked,
    hook_service: list[HookRequest],
    client: TetherClient,
) -> None:
    before = await hook_failures(stack, "timeout")
    await hooked.add(
        name="slow", point="before_tool", transport="nats", target="slow", timeout_s=0.3
    )
    sent = call("calculate", expression="6*7")
    _run, events = await run_script([[sent], say("done")])
    closed = result_of(events, sent)
    assert (closed["ok"], closed["error_code"]) == (False, "hook_failed")
    assert {"kind": "hook", "name": "slow", "code": "timeout"}.items() <= next(
        g for g in event_data(events, "guard") if g.get("kind") == "hook"
    ).items()

    await client.remove_hook("slow")
    hooked.names.remove("slow")
    await hooked.add(
        name="slow-open",
        point="before_tool",
        transport="nats",
        target="slow",
        timeout_s=0.3,
        failure="fail_open",
    )
    sent = call("calculate", expression="6*7")
    _run, events = await run_script([[sent], say("done")])
    opened = result_of(events, sent)
    assert opened["ok"], opened
    assert "42" in opened["content"]
    assert await hook_failures(stack, "timeout") >= before + 2  # each failure counted


async def test_an_https_hook_is_signed_with_the_secret_it_was_given(
    run_script: RunScript, hooked: Hooked, endpoint: Endpoint
) -> None:
    receiver = endpoint.receiver
    receiver.seen.clear()
    receiver.body = json.dumps({"action": "deny", "reason": "no clocks today"}).encode()
    secret = await hooked.add(
        name="checker", point="before_tool", transport="https", target=endpoint.url
    )
    assert secret is not None
    assert secret.startswith("hksec_")
    sent = call("current_time", timezone="UTC")
    _run, events = await run_script([[sent], say("done")])
    denied = result_of(events, sent)
    assert denied["error_code"] == "hook_denied"
    assert "no clocks today" in denied["content"]
    (seen,) = receiver.seen
    assert seen["body"]["call"]["name"] == "current_time"
    assert verify(secret, seen["raw"], seen["signature"])
    assert not verify("hksec_" + "0" * 43, seen["raw"], seen["signature"])
    listed = await hooked.client.hooks()
    assert "secret" not in json.dumps(listed.model_dump(mode="json"))  # shown once only


async def test_the_redaction_hook_keeps_a_secret_from_the_model_the_events_and_the_view(
    stack: Supervisor, run_script: RunScript, hooked: Hooked, database_url: str
) -> None:
    await hooked.add(
        name="no-secrets", point="after_tool", transport="builtin", target="redact_secrets"
    )
    read = call("file_read", path="config.txt")
    # The provider answers an error instead of the turn if its request holds the secret.
    run, events = await run_script([[read], [{"absent": SECRET}, *say("done")]])
    assert (run.status, run.answer) == ("completed", "done")
    assert "[redacted:" in result_of(events, read)["content"]
    assert "region = eu" in result_of(events, read)["content"]
    assert SECRET not in json.dumps([e.model_dump(mode="json") for e in events])
    assert SECRET not in run.model_dump_json()
    # The original is kept for an admin, under no run the run's readers can name.
    (kept,) = [d for e, d in await audit_of(database_url, run.run_id) if e == "hook.original"]
    assert kept["output_ref"]
    brain = stack.child("brain").url
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=10, headers=headers) as http:
        through_run = await http.get(f"{brain}/v1/runs/{run.run_id}/outputs/{kept['output_ref']}")
        assert through_run.status_code == 404
        store = stack.child("output-store").url
        original = await http.get(f"{store}/v1/outputs/{kept['output_ref']}")
    assert original.status_code == 200
    assert SECRET in original.text


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data/",
        "https://10.1.2.3/hook",
        "https://[::1]:9000/hook",
        "http://hooks.example.com/",
        "https://localhost/hook",
    ],
)
async def test_the_api_refuses_a_hook_url_the_guard_refuses(client: TetherClient, url: str) -> None:
    with pytest.raises(TetherError) as refused:
        await client.add_hook(
            AddHook(name="bad", point="before_tool", transport="https", target=url)
        )
    assert refused.value.code == "hook_refused"
    assert [h.name for h in (await client.hooks()).hooks if h.name == "bad"] == []


async def test_the_cli_adds_lists_shows_and_removes_a_hook_audited(
    stack: Supervisor,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    database_url: str,
) -> None:
    monkeypatch.setenv("TETHER_API_URL", stack.child("brain").url)
    monkeypatch.setenv("TETHER_TOKEN", TOKEN)
    capsys.readouterr()
    add = ["hooks", "add", "topics", "--point", "before_answer", "--transport", "builtin"]
    add += ["--target", "deny_topics", "--options", '{"topics": ["merger"]}', "-o", "json"]
    assert await asyncio.to_thread(main, add) == 0
    assert json.loads(capsys.readouterr().out)["options"] == {"topics": ["merger"]}
    assert await asyncio.to_thread(main, ["hooks", "list"]) == 0
    assert "deny_topics" in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["hooks", "show", "topics", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["point"] == "before_answer"
    assert await asyncio.to_thread(main, ["hooks", "remove", "topics"]) == 0
    assert await asyncio.to_thread(main, ["hooks", "show", "topics"]) != 0
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        changes = await conn.fetch(
            "SELECT data::text AS data FROM audit_records WHERE run_id = 'policy'"
            " AND event = 'hooks.changed' ORDER BY seq"
        )
    finally:
        await conn.close()
    assert len(changes) >= 2  # the add and the removal, each a record of its own
