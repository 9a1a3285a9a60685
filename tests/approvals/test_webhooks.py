"""Operators are told: signed webhook deliveries of approval notices to a local receiver
that checks the signature, retried while the receiver is down, dead-lettered (listed,
re-sendable) when it stays down; the NATS notice subject; the endpoints API's rules."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from dbkit import new_database
from shipped import observe, shipped_stack
from tether_approvals.notices.outbox import Sender
from tether_approvals.notices.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    sign,
    verify,
)
from tether_approvals.notices.webhooks import DeliveryView, WebhookView
from tether_approvals.settings import WebhookSettings
from tether_approvals.testing import ApprovalsHarness, auth
from tether_approvals.testing.receiver import Receiver, closed_port, receiver
from tether_client.cli import main
from tether_client.server.supervisor import Supervisor
from tether_common.db import make_engine
from tether_common.messages.approvals import ApprovalNotice
from tether_common.messages.base import decode
from tether_common.testing import until
from tether_common.topology import BY_NAME

OPERATOR_TOKEN = "test-operator-token"
PUBLIC_URL = "https://approvals.example.test"
ATTEMPTS = 4


@pytest.fixture(scope="module")
async def hooks_database_url(database_url: str) -> str:
    """This module's own database. On the session's shared one, every approvals service
    of the session also sends this module's deliveries (with its own attempts and back-off: a
    dead letter can then come after 5 attempts, not 4), and requests earlier modules left
    pending expire into this module's receivers."""
    return await new_database(database_url, "webhooks")


@pytest.fixture(scope="module")
async def hooks_service(hooks_database_url: str) -> AsyncIterator[Supervisor]:
    """An approvals service of its own (as `tether up` starts it), with back-off small
    enough for a test."""
    base = Path(tempfile.mkdtemp(prefix="tether-webhooks-"))
    env = {
        "TETHER_DB_POOL_SIZE": "5",
        "TETHER_APPROVALS_PUBLIC_URL": PUBLIC_URL,
        "TETHER_APPROVALS_WEBHOOKS__POLL_S": "0.05",
        "TETHER_APPROVALS_WEBHOOKS__BACKOFF_S": "0.05",
        "TETHER_APPROVALS_WEBHOOKS__BACKOFF_MAX_S": "0.2",
        "TETHER_APPROVALS_WEBHOOKS__ATTEMPTS": str(ATTEMPTS),
        "TETHER_APPROVALS_WEBHOOKS__TIMEOUT_S": "2",
        "TETHER_APPROVALS_WEBHOOKS__CLAIM_S": "3",
        # The tests' receivers listen on loopback: the deployment names that host (and no
        # other private one), as an admin would name an in-cluster chat bridge.
        "TETHER_APPROVALS_WEBHOOKS__PRIVATE_HOSTS": json.dumps(["127.0.0.1"]),
    }
    try:
        async with shipped_stack(
            base,
            hooks_database_url,
            operator_token=OPERATOR_TOKEN,
            extra_env=env,
            specs=(BY_NAME["approvals"],),
            ready_s=60,
        ) as supervisor:
            yield supervisor
        for log_file in (base / "logs").glob("*.log"):
            assert "whsec_" not in log_file.read_text(), "a webhook secret reached the log"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
async def hooks(hooks_service: Supervisor) -> AsyncIterator[ApprovalsHarness]:
    url = hooks_service.child("approvals").url
    async with (
        await observe(hooks_service) as bus,
        httpx.AsyncClient(base_url=url, timeout=15) as http,
    ):
        yield ApprovalsHarness(bus, http, url, OPERATOR_TOKEN)


async def register(
    hooks: ApprovalsHarness, url: str, token: str | None = None, **fields: Any
) -> tuple[str, str]:
    """A new endpoint's id and secret (shown this once)."""
    response = await hooks.http.post(
        "/v1/webhooks", json={"url": url} | fields, headers=auth(token or hooks.admin_token)
    )
    assert response.status_code == 201, response.text
    body = response.json()
    return body["endpoint"]["endpoint_id"], body["secret"]


async def unregister(hooks: ApprovalsHarness, endpoint_id: str) -> None:
    response = await hooks.http.delete(
        f"/v1/webhooks/{endpoint_id}", headers=auth(hooks.admin_token)
    )
    assert response.status_code == 200, response.text


async def deliveries(hooks: ApprovalsHarness, token: str | None = None, **query: str) -> Any:
    response = await hooks.http.get(
        "/v1/webhooks/deliveries",
        params=query | {"limit": "1000"},
        headers=auth(token or hooks.admin_token),
    )
    assert response.status_code == 200, response.text
    return response.json()["deliveries"]


async def delivery_of(
    hooks: ApprovalsHarness, endpoint_id: str, approval_id: str, status: str
) -> dict[str, Any]:
    """Wait until the delivery of `approval_id`'s request to `endpoint_id` has `status`."""
    wanted = (endpoint_id, approval_id, "approval.requested", status)

    async def delivered() -> dict[str, Any] | None:
        for row in await deliveries(hooks):
            if (row["endpoint_id"], row["approval_id"], row["kind"], row["status"]) == wanted:
                return dict(row)
        return None

    return await until(delivered, timeout=20, what=f"a delivery {wanted}")


@pytest.fixture
async def hook(hooks: ApprovalsHarness) -> AsyncIterator[tuple[Receiver, str]]:
    """A receiver registered as an endpoint (removed afterwards, so tests stay apart)."""
    async with receiver() as found:
        endpoint_id, found.secret = await register(hooks, found.url)
        try:
            yield found, endpoint_id
        finally:
            await unregister(hooks, endpoint_id)


async def test_a_request_reaches_the_receiver_as_a_signed_card(
    hooks: ApprovalsHarness, hook: tuple[Receiver, str]
) -> None:
    found, _ = hook
    notices = await hooks.bus.subscribe_raw(hooks.bus.subjects.approval_notices)
    long_text = "x" * 5000
    created = await hooks.create(
        tool="shell",
        args={"command": "rm -rf build", "stdin": long_text},
        agent="deployer",
        owner="alice",
    )
    delivery = await found.one(created.approval_id, "approval.requested")
    assert delivery.verified
    assert delivery.answered == 204
    assert delivery.event == "approval.requested"
    assert delivery.headers["content-type"] == "application/json"
    card = delivery.json["card"]
    assert delivery.json["notice_id"] == delivery.delivery_id
    assert card["title"] == "Approval needed: shell (deployer)"
    assert card["summary"].startswith("shell: ")
    assert "command=rm -rf build" in card["summary"]
    assert "stdin=" + "x" * 99 + "…" in card["summary"]
    assert len(card["summary"]) <= 300
    assert card["arguments"]["command"] == "rm -rf build"
    assert card["arguments"]["stdin"].startswith("x" * 2000 + "… [3000 more characters]")
    assert (card["run_id"], card["agent"], card["requester"], card["tool"]) == (
        created.run_id,
        "deployer",
        "alice",
        "shell",
    )
    assert card["expires_at"].startswith(created.expires_at.isoformat()[:19])
    links = card["links"]
    assert links["view"] == f"{PUBLIC_URL}/?approval={created.approval_id}"
    assert links["approve"].endswith("decision=allow_once")
    assert links["deny"].endswith("decision=deny")
    assert links["decision_api"] == f"{PUBLIC_URL}/v1/approvals/{created.approval_id}/decision"
    assert OPERATOR_TOKEN not in delivery.body.decode()

    # The same notice on NATS, for in-house notifiers.
    async with asyncio.timeout(10):
        while True:
            told = decode(ApprovalNotice, (await notices.next_msg(timeout=10)).data)
            if told.card.approval_id == created.approval_id:
                break
    assert told.notice_id == delivery.delivery_id
    assert told.kind == "approval.requested"

    # A decision is a notice too; it carries who decided.
    assert (await hooks.decide(created.approval_id, "deny", note="not today")).status_code == 200
    decided = await found.one(created.approval_id, "approval.decided")
    assert decided.verified
    assert decided.delivery_id != delivery.delivery_id
    assert decided.json["card"]["decision"] == "deny"
    assert decided.json["card"]["decided_by"] == "operator"
    assert len(found.of(created.approval_id)) == 2, found.described()
    await notices.unsubscribe()


async def test_automated_answers_and_other_tenants_are_not_sent(
    hooks: ApprovalsHarness, hook: tuple[Receiver, str]
) -> None:
    """Nobody is asked about a request an automated approver answered, and an endpoint
    hears only its own tenant's requests."""
    found, _ = hook
    async with receiver() as other:
        other_id, other.secret = await register(hooks, other.url, tenant="acme")
        try:
            elsewhere = await hooks.create(tenant="acme")
            here = await hooks.create()
            await found.wait_for(lambda _: bool(found.of(here.approval_id)))
            await other.wait_for(lambda _: bool(other.of(elsewhere.approval_id)))
            assert not found.of(elsewhere.approval_id)
            assert not other.of(here.approval_id)
        finally:
            await unregister(hooks, other_id)


async def test_an_endpoint_hears_what_becomes_of_requests_older_than_itself(
    hooks: ApprovalsHarness,
) -> None:
    """An endpoint is told of every change its tenant's requests go through once it is
    registered, requests made before it included (their decision, expiry, withdrawal),
    and of nothing from before. So tests wait for their own approval's deliveries: the
    session's services share one database (one deployment), and requests earlier
    modules left pending expire while a later test runs (CI once saw such an expiry
    reach `test_a_request_reaches_the_receiver_as_a_signed_card`'s receiver)."""
    earlier = await hooks.create()
    async with receiver() as found:
        endpoint_id, found.secret = await register(hooks, found.url)
        try:
            assert (await hooks.decide(earlier.approval_id, "deny")).status_code == 200
            told = await found.one(earlier.approval_id, "approval.decided")
            assert told.verified
            assert told.json["card"]["status"] == "denied"
            assert not found.of(earlier.approval_id, "approval.requested"), found.described()
        finally:
            await unregister(hooks, endpoint_id)


async def test_a_test_waits_for_its_own_delivery_and_is_told_what_else_came() -> None:
    """`Receiver.one` picks one approval's delivery out of others; a second one of it,
    or none, fails naming everything the receiver got (what a CI failure then shows)."""
    async with receiver() as found, httpx.AsyncClient(timeout=10) as http:
        found.secret = "the-secret"

        async def send(approval_id: str, event: str, notice_id: str) -> None:
            card = {"approval_id": approval_id, "tenant": "default"}
            body = json.dumps({"notice_id": notice_id, "card": card}).encode()
            headers = {
                SIGNATURE_HEADER: sign(found.secret, body),
                DELIVERY_HEADER: notice_id,
                EVENT_HEADER: event,
            }
            assert (await http.post(found.url, content=body, headers=headers)).status_code == 204

        await send("apr_other", "approval.expired", "ntc_1")
        await send("apr_mine", "approval.requested", "ntc_2")
        assert (await found.one("apr_mine", "approval.requested")).delivery_id == "ntc_2"
        await send("apr_mine", "approval.requested", "ntc_2")
        with pytest.raises(AssertionError) as twice:
            await found.one("apr_mine", "approval.requested")
        assert "2 deliveries of approval.requested apr_mine" in str(twice.value)
        assert (await found.first("apr_mine", "approval.requested")) is found.seen[1]
        assert "approval.expired ntc_1 answered=204 verified=True approval_id=apr_other" in str(
            twice.value
        )
        with pytest.raises(AssertionError, match="the receiver got 3 deliveries"):
            await found.one("apr_never", "approval.requested", timeout=0.2)


async def test_a_receiver_down_for_a_while_gets_the_delivery_when_it_comes_back(
    hooks: ApprovalsHarness, hook: tuple[Receiver, str]
) -> None:
    found, endpoint_id = hook
    found.failures_left = ATTEMPTS - 1
    created = await hooks.create()
    row = await delivery_of(hooks, endpoint_id, created.approval_id, "delivered")
    tries = found.of(created.approval_id, "approval.requested")
    assert [t.answered for t in tries] == [503] * (ATTEMPTS - 1) + [204], found.described()
    assert len({t.delivery_id for t in tries}) == 1, "a re-send keeps its delivery id"
    assert all(t.verified for t in tries)
    assert len({t.signature for t in tries}) >= 1
    assert row["attempts"] == ATTEMPTS
    assert row["last_error"] is None


async def test_a_receiver_down_for_good_is_dead_lettered_listed_and_resendable(
    hooks: ApprovalsHarness, hook: tuple[Receiver, str]
) -> None:
    found, endpoint_id = hook
    found.down = True
    created = await hooks.create()
    dead = await delivery_of(hooks, endpoint_id, created.approval_id, "dead")
    assert dead["attempts"] == ATTEMPTS
    assert dead["last_error"] == "http_503"
    assert len(found.of(created.approval_id, "approval.requested")) == ATTEMPTS, found.described()
    listed = await deliveries(hooks, status="dead")
    assert dead["delivery_id"] in {d["delivery_id"] for d in listed}
    assert all(d["status"] == "dead" for d in listed)

    found.down = False
    retried = await hooks.http.post(
        f"/v1/webhooks/deliveries/{dead['delivery_id']}/retry", headers=auth(hooks.admin_token)
    )
    assert retried.status_code == 200, retried.text
    assert (retried.json()["status"], retried.json()["attempts"]) == ("pending", 0)
    await delivery_of(hooks, endpoint_id, created.approval_id, "delivered")
    last = found.of(created.approval_id, "approval.requested")[-1]
    assert last.answered == 204
    assert last.verified
    again = await hooks.http.post(
        f"/v1/webhooks/deliveries/{dead['delivery_id']}/retry", headers=auth(hooks.admin_token)
    )
    assert again.status_code == 409, "only a dead delivery is re-sent by hand"


async def test_a_delivery_in_flight_when_the_service_dies_is_sent_again(
    hooks: ApprovalsHarness, hooks_service: Supervisor, hook: tuple[Receiver, str]
) -> None:
    """The notice is written with the request; a service killed while the receiver holds
    the delivery open leaves the row claimed, and the restarted service sends it again
    once the claim lapses (the same delivery id: the receiver can tell)."""
    found, endpoint_id = hook
    found.stalled = True
    created = await hooks.create()
    held = await found.first(created.approval_id, "approval.requested")
    assert held.answered == 0
    child = hooks_service.child("approvals")
    hooks_service.kill("approvals")
    await hooks_service.stop_child(child)
    found.release()
    await hooks_service.start_child(child)
    await hooks_service.wait_ready(timeout=60)
    row = await delivery_of(hooks, endpoint_id, created.approval_id, "delivered")
    tries = found.of(created.approval_id, "approval.requested")
    assert [t.answered for t in tries] == [0, 204], found.described()
    assert len({t.delivery_id for t in tries}) == 1
    assert row["attempts"] == 2


async def test_replicas_share_the_outbox(
    hooks: ApprovalsHarness, hook: tuple[Receiver, str], hooks_database_url: str
) -> None:
    """Four more senders on the same outbox (with the service's own): every notice
    arrives, and none twice (rows are claimed with FOR UPDATE SKIP LOCKED)."""
    found, _ = hook
    engine = make_engine(hooks_database_url)
    published: list[str] = []

    async def publish(subject: str, told: ApprovalNotice) -> None:
        published.append(told.notice_id)

    settings = WebhookSettings(poll_s=0.01, batch=3, timeout_s=5, private_hosts=["127.0.0.1"])
    senders = [Sender(engine, settings, publish) for _ in range(4)]
    try:
        created = [await hooks.create(step=n) for n in range(24)]
        wanted = {c.approval_id for c in created}

        async def work(sender: Sender) -> None:
            while not wanted <= {d.json["card"]["approval_id"] for d in found.seen}:
                if not await sender.tick():
                    await asyncio.sleep(0.01)

        async with asyncio.timeout(30):
            await asyncio.gather(*(work(s) for s in senders))
        for approval_id in wanted:
            assert len(found.of(approval_id, "approval.requested")) == 1, approval_id
        assert len(published) == len(set(published))
    finally:
        for sender in senders:
            await sender.aclose()
        await engine.dispose()


async def until_a_lock_is_awaited(conn: asyncpg.Connection) -> None:
    """Until a session of this database waits for a lock (the service's, on the row the
    test holds), however slow the machine."""
    query = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    await until(lambda: conn.fetchval(query), timeout=60, what="a session waiting for a lock")


async def test_an_endpoint_removed_while_a_request_is_written_refuses_nothing(
    hooks: ApprovalsHarness, hooks_database_url: str
) -> None:
    """An endpoint deleted between the moment a change reads its tenant's endpoints and the
    moment it writes their notices: the change is made all the same (without a notice for
    the endpoint), never refused for a notice nobody can receive any more."""
    endpoint_id, _ = await register(hooks, "https://hooks.example.test/going")
    conn = await asyncpg.connect(hooks_database_url.replace("+asyncpg", "", 1))
    try:
        deleting = conn.transaction()
        await deleting.start()
        await conn.execute("DELETE FROM webhook_endpoints WHERE endpoint_id = $1", endpoint_id)
        creating = asyncio.create_task(hooks.create())
        other = await asyncpg.connect(hooks_database_url.replace("+asyncpg", "", 1))
        try:
            await until_a_lock_is_awaited(other)
        finally:
            await other.close()
        await deleting.commit()
        created = await creating
    finally:
        await conn.close()
    assert created.status == "pending"
    rows = [r for r in await deliveries(hooks) if r["approval_id"] == created.approval_id]
    assert [r["sink"] for r in rows] == ["nats"], rows


async def test_an_unreachable_receiver_is_dead_lettered(hooks: ApprovalsHarness) -> None:
    endpoint_id, _ = await register(hooks, f"http://127.0.0.1:{closed_port()}/hook")
    try:
        created = await hooks.create()
        dead = await delivery_of(hooks, endpoint_id, created.approval_id, "dead")
        assert dead["last_error"] == "ConnectError"
    finally:
        await unregister(hooks, endpoint_id)


async def test_a_wrong_secret_fails_verification_at_the_receiver(
    hooks: ApprovalsHarness, hook: tuple[Receiver, str]
) -> None:
    found, _ = hook
    secret, found.secret = found.secret, "whsec_" + "w" * 43
    created = await hooks.create()
    # The first of several: each answer 401 is a failure, so the notice is sent again.
    delivery = await found.first(created.approval_id, "approval.requested")
    assert not delivery.verified
    assert delivery.answered == 401
    assert verify(secret, delivery.body, delivery.signature)
    # Every other way of getting the signature wrong fails too.
    body, header = delivery.body, delivery.signature
    ts = int(header.split(",")[0][2:])
    tampered = body.replace(b"ls -la /tmp", b"rm -rf /tmp", 1)
    assert tampered != body
    for wrong_secret, wrong_body, wrong_header in [
        (secret[:-1], body, header),
        (secret + "x", body, header),
        ("", body, header),
        (secret, body + b" ", header),
        (secret, tampered, header),
        (secret, b"", header),
        (secret, body, None),
        (secret, body, ""),
        (secret, body, header.split(",")[0]),
        (secret, body, header.replace("v1=", "v0=")),
        (secret, body, f"t={ts + 1}," + header.split(",")[1]),
        (secret, body, "t=abc," + header.split(",")[1]),
        (secret, body, sign(secret, body, ts=int(time.time()) - 3600)),  # a replay
        (secret, body, sign(secret, body, ts=int(time.time()) + 3600)),
        (secret, body, sign("whsec_other", body)),
        (secret, body, header.upper()),
    ]:
        assert not verify(wrong_secret, wrong_body, wrong_header), (wrong_secret, wrong_header)
    assert verify(secret, body, sign(secret, body))


async def test_an_operator_given_secret_signs(hooks: ApprovalsHarness) -> None:
    async with receiver() as found:
        given = "an-operator-chosen-secret-of-some-length"
        endpoint_id, shown = await register(hooks, found.url, secret=given)
        found.secret = given
        try:
            assert shown == given
            created = await hooks.create()
            delivery = await found.one(created.approval_id, "approval.requested")
            assert delivery.verified
        finally:
            await unregister(hooks, endpoint_id)


async def test_endpoints_need_webhooks_manage_and_stay_in_their_tenant(
    hooks: ApprovalsHarness,
) -> None:
    acme_op = await hooks.token("operator", tenant="acme")
    other_op = await hooks.token("operator", tenant="globex")
    approver = await hooks.token("approver", tenant="acme")
    mine, _ = await register(hooks, "https://hooks.example.test/acme", token=acme_op)
    try:
        for token, status in [(None, 401), ("tth_not-a-token", 401), (approver, 403)]:
            headers = {} if token is None else auth(token)
            for method, path in [
                ("GET", "/v1/webhooks"),
                ("POST", "/v1/webhooks"),
                ("DELETE", f"/v1/webhooks/{mine}"),
                ("GET", "/v1/webhooks/deliveries"),
                ("POST", "/v1/webhooks/deliveries/dlv_x/retry"),
            ]:
                body = {"url": "https://x.example.test"} if method == "POST" else None
                response = await hooks.http.request(method, path, json=body, headers=headers)
                assert response.status_code == status, (token, method, path, response.text)
        listed = (await hooks.http.get("/v1/webhooks", headers=auth(acme_op))).json()
        assert [e["endpoint_id"] for e in listed["endpoints"]] == [mine]
        assert "secret" not in json.dumps(listed)
        theirs = (await hooks.http.get("/v1/webhooks", headers=auth(other_op))).json()
        assert mine not in json.dumps(theirs)
        gone = await hooks.http.delete(f"/v1/webhooks/{mine}", headers=auth(other_op))
        assert gone.status_code == 404
        assert "acme" not in gone.text
        across = await hooks.http.post(
            "/v1/webhooks",
            json={"url": "https://x.example.test", "tenant": "acme"},
            headers=auth(other_op),
        )
        assert across.status_code == 404
        for row in await deliveries(hooks, token=other_op):
            assert row["tenant"] == "globex"
    finally:
        await unregister(hooks, mine)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example.test/x",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "gopher://hooks.example.test/",
        "ws://hooks.example.test/",
        "http:///nohost",
        "https://user:password@hooks.example.test/x",
        "https://token@hooks.example.test/x",
        "hooks.example.test/x",
        "//hooks.example.test/x",
        "not a url at all",
        "data:text/plain,hello",
    ],
)
async def test_only_http_urls_without_credentials_are_taken(
    hooks: ApprovalsHarness, url: str
) -> None:
    response = await hooks.http.post(
        "/v1/webhooks", json={"url": url}, headers=auth(hooks.admin_token)
    )
    assert response.status_code == 422, response.text
    assert "password" not in response.text


def test_no_view_has_a_secret_field() -> None:
    assert "secret" not in DeliveryView.model_fields
    assert "secret" not in WebhookView.model_fields


def ssrf_targets(nats_url: str, approvals_url: str) -> list[str]:
    """Receivers in the service's own network a tenant operator might try: the bus, its
    monitoring port, this service, PostgreSQL, metadata, in the spellings that slip
    past a naive check (127.0.0.1 itself is the deployment's named test host)."""
    nats, service = httpx.URL(nats_url).port, httpx.URL(approvals_url).port
    return [
        f"http://localhost:{service}/v1/approvals",
        f"http://127.0.0.2:{nats}/",
        f"http://[::1]:{service}/",
        f"http://[::ffff:127.0.0.2]:{service}/",
        "http://127.1.2.3:8222/varz",
        "http://0.0.0.0:5432/",
        "http://localhost.:8222/connz",
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://2852039166/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://10.0.0.5/",
        "http://0xa.1/",
        "http://192.168.1.1:8080/",
        "http://100.64.0.1/",
        "http://[fe80::1]/",
        "http://[fd12::1]/",
        "http://db.internal:5432/",
    ]


async def test_a_tenant_operator_cannot_aim_a_receiver_at_the_services_network(
    hooks: ApprovalsHarness, hooks_service: Supervisor
) -> None:
    """The reported break: an operator of one tenant registered receivers on loopback
    ports and link-local addresses. Refused with a reason, whoever asks, unless the
    deployment named the host."""
    operator = await hooks.token("operator", tenant="acme")
    problems: list[str] = []
    for url in ssrf_targets(hooks_service.env["TETHER_NATS_URL"], hooks.url):
        for token in (operator, hooks.admin_token):
            answer = await hooks.http.post("/v1/webhooks", json={"url": url}, headers=auth(token))
            if answer.status_code == 201:
                await unregister(hooks, answer.json()["endpoint"]["endpoint_id"])
            if answer.status_code != 422 or answer.json()["error"]["code"] != "webhook_url_refused":
                problems.append(f"{url}: {answer.status_code}")  # the body holds a secret
    assert not problems, "\n".join(problems)


async def test_an_operator_sees_only_that_a_delivery_failed(hooks: ApprovalsHarness) -> None:
    """The status oracle: each failure's class (`ConnectError` for a closed port,
    `http_401` for a service that wants a token) mapped the network. A tenant operator
    now reads `failed`; an admin still reads the class."""
    operator = await hooks.token("operator", tenant="acme")
    async with receiver() as found:
        found.secret = "not-the-endpoint-secret"  # so it answers every delivery 401
        closed, _ = await register(hooks, f"http://127.0.0.1:{closed_port()}/hook", token=operator)
        refusing, _ = await register(hooks, found.url, token=operator)
        try:
            created = await hooks.create(tenant="acme")
            expected = {closed: "ConnectError", refusing: "http_401"}
            for endpoint_id, error in expected.items():
                dead = await delivery_of(hooks, endpoint_id, created.approval_id, "dead")
                assert dead["last_error"] == error
            mine = [
                row
                for row in await deliveries(hooks, token=operator)
                if row["endpoint_id"] in expected
            ]
            assert {row["endpoint_id"] for row in mine} == set(expected)
            assert {row["status"] for row in mine} == {"dead"}
            assert {row["last_error"] for row in mine} == {"failed"}
            listed = json.dumps(await deliveries(hooks, token=operator))
            for detail in ("ConnectError", "http_", "Error"):
                assert detail not in listed
            retried = await hooks.http.post(
                f"/v1/webhooks/deliveries/{mine[0]['delivery_id']}/retry", headers=auth(operator)
            )
            assert retried.status_code == 200, retried.text
            assert retried.json()["last_error"] == "failed"
        finally:
            await unregister(hooks, closed)
            await unregister(hooks, refusing)


async def test_the_cli_manages_webhooks_and_dead_letters(
    hooks: ApprovalsHarness, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tether webhooks create|list|deliveries|retry|delete` against the real service."""
    monkeypatch.setenv("TETHER_APPROVALS_URL", hooks.url)
    monkeypatch.setenv("TETHER_TOKEN", hooks.admin_token)

    async def tether(*argv: str) -> list[str]:
        capsys.readouterr()
        assert await asyncio.to_thread(main, list(argv)) == 0
        return capsys.readouterr().out.splitlines()

    async with receiver() as found:
        found.down = True
        endpoint_line, secret = await tether(
            "webhooks", "create", found.url, "--events", "requested,withdrawn"
        )
        endpoint_id = endpoint_line.split()[0]
        found.secret = secret
        assert "requested,withdrawn" in endpoint_line
        assert any(line.startswith(endpoint_id) for line in await tether("webhooks", "list"))
        assert secret not in "\n".join(await tether("webhooks", "list"))
        created = await hooks.create()
        await delivery_of(hooks, endpoint_id, created.approval_id, "dead")
        dead = [
            line
            for line in await tether("webhooks", "deliveries", "--status", "dead")
            if created.approval_id in line and endpoint_id in line
        ]
        assert len(dead) == 1
        found.down = False
        [retried] = await tether("webhooks", "retry", dead[0].split()[0])
        assert " pending " in retried
        await delivery_of(hooks, endpoint_id, created.approval_id, "delivered")
        assert found.of(created.approval_id)[-1].verified
        [deleted] = await tether("webhooks", "delete", endpoint_id)
        assert deleted.startswith(endpoint_id)


async def test_an_endpoint_hears_no_more_than_its_creator_may_read(
    hooks: ApprovalsHarness,
) -> None:
    """An operator limited to some agents or run owners makes an endpoint with the same
    limits: requests outside them are never written for it (checked in the outbox, which
    is written with the request)."""
    limited = await hooks.token("operator", agents=["deployer"], owners=["alice", "bob"])
    async with receiver() as found:
        endpoint_id, found.secret = await register(hooks, found.url, token=limited)
        try:
            listed = (await hooks.http.get("/v1/webhooks", headers=auth(limited))).json()
            [view] = [e for e in listed["endpoints"] if e["endpoint_id"] == endpoint_id]
            assert (view["agents"], view["owners"]) == (["deployer"], ["alice", "bob"])
            outside = [
                await hooks.create(agent="other", owner="alice"),
                await hooks.create(agent=None, owner="alice"),
                await hooks.create(agent="deployer", owner="carol"),
                await hooks.create(agent="deployer", owner=None),
            ]
            inside = await hooks.create(agent="deployer", owner="bob")
            rows = await deliveries(hooks)
            mine = {r["approval_id"] for r in rows if r["endpoint_id"] == endpoint_id}
            assert inside.approval_id in mine
            assert not mine & {o.approval_id for o in outside}
            await found.wait_for(lambda _: bool(found.of(inside.approval_id)))
        finally:
            await unregister(hooks, endpoint_id)
