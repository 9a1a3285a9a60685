"""The console (`/console` on the brain: runs and approvals, one sign-in) in a real headless
Chromium against the real services: signed in once, the runs list and the Approvals
view; a card decided there resumes its run; a token sees only its tenant's requests; the
approvals service's own address leads here; the open console counts as an operator
present. A run started with the scripted provider appears on the list and updates live;
its page shows the timeline (model text, the call's arguments, the gate's ask, the
approval, the outcome, the stored output with its digest and a download), usage, audit
state and the trace link; an approver approves the parked call from the page and the run
finishes; a viewer's approve is refused by the approvals service; an operator messages
and stops a run. Nothing a model, a tool or a prompt writes runs in the page: a run made
of script-injection payloads shows them all as text, with no injected element, nothing
executed and no Content-Security-Policy violation. The schedules view shows each
schedule's next tick and last run. Screenshots are kept as test
artefacts."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select

from chromium_browser import (
    WAIT_S,
    artefacts_dir,
    chromium,
    screenshot,
    sign_in,
    text_of,
    texts_of,
    wait_for,
    wait_until,
)
from display_corpus import SERVICE_CORPUS
from tether_brain.console.page import assemble
from tether_client.server.supervisor import Supervisor
from tether_common.bus import Bus
from tether_common.display import INVISIBLE, shown
from tether_common.messages.approvals import (
    ApprovalView,
    CreateApproval,
    Presence,
    PresenceQuery,
)
from tether_common.testing import Turn, call, say, until, write_script

pytestmark = pytest.mark.e2e

ADMIN = "test-operator-token"  # tests/conftest.py: the bootstrap admin
TRACE_URL = "http://traces.example/trace/{trace_id}?run={run_id}"
COUNT = 3000  # `seq 1 3000` prints ~14 KB: above the shell's 4 KiB, so it is stored
# Watches the page for CSP violations from before its first script runs.
RECORD_VIOLATIONS = (
    "window.__violations = [];"
    "document.addEventListener('securitypolicyviolation',"
    " (e) => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"
)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def stack_extra_env() -> dict[str, str]:
    return {"TETHER_BRAIN_TRACE_URL": TRACE_URL}


@dataclass
class Console:
    url: str  # the brain's
    http: httpx.AsyncClient  # on the brain, as the admin
    scripts: Path
    tokens: dict[str, str]  # role → a token of that role

    async def start(self, turns: list[Turn], prompt: str = "count", **options: Any) -> str:
        model = write_script(self.scripts, turns)
        body = {"prompt": prompt, "provider": "scripted", "model": model} | options
        started = await self.http.post("/v1/runs", json=body)
        assert started.status_code == 201, started.text
        return str(started.json()["run_id"])

    async def run(self, run_id: str) -> dict[str, Any]:
        found = await self.http.get(f"/v1/runs/{run_id}")
        assert found.status_code == 200, found.text
        return dict(found.json())

    async def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events so far (the stream is cut at the first idle moment)."""
        got: list[dict[str, Any]] = []
        path = f"/v1/runs/{run_id}/events"
        async with self.http.stream("GET", path, timeout=WAIT_S) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    got.append(json.loads(line[5:]))
                    if got[-1]["kind"] in ("run.end", "tool.approval_needed"):
                        break
        return got

    async def approvals(self, run_id: str) -> list[dict[str, Any]]:
        found = await self.http.get(f"/v1/runs/{run_id}/approvals")
        assert found.status_code == 200, found.text
        return list(found.json()["approvals"])


@pytest.fixture(scope="module")
async def console(stack: Supervisor, scripts_dir: Path) -> AsyncIterator[Console]:
    url = stack.child("brain").url
    async with httpx.AsyncClient(base_url=url, headers=bearer(ADMIN), timeout=WAIT_S) as http:
        tokens = {"admin": ADMIN}
        for role in ("approver", "viewer", "operator"):
            made = await http.post("/v1/tokens", json={"name": f"con-{role}", "role": role})
            assert made.status_code == 201, made.text
            tokens[role] = made.json()["token"]
        yield Console(url, http, scripts_dir, tokens)


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory, downloads: Path) -> Iterator[WebDriver]:
    with chromium(tmp_path_factory.mktemp("chromium"), downloads=downloads) as driver:
        driver.execute_cdp_cmd(
            "Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_VIOLATIONS}
        )
        yield driver


def enter(driver: WebDriver, url: str, token: str) -> None:
    """A fresh page signed in with `token` (the previous session is signed out)."""
    driver.get("about:blank")
    driver.get(url + "/console")
    if driver.find_elements(By.CSS_SELECTOR, "#signout:not([hidden])"):
        driver.find_element(By.ID, "signout").click()
    sign_in(driver, url + "/console", token)


def open_run(driver: WebDriver, run_id: str) -> None:
    driver.find_element(By.CSS_SELECTOR, f'tr[data-run-id="{run_id}"] td.id a').click()
    wait_until(driver, lambda d: text_of(d, "#run-title") == run_id)


def status_is(driver: WebDriver, status: str) -> None:
    wait_for(driver, f'#run-status[data-status="{status}"]', timeout=60)


def no_violations(driver: WebDriver) -> list[str]:
    return list(driver.execute_script("return window.__violations || ['not recorded']"))


def readme_shot(driver: WebDriver) -> None:
    """With `TETHER_SCREENSHOTS_DIR` set (e.g. to docs/images), the README's picture."""
    folder = os.environ.get("TETHER_SCREENSHOTS_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(Path(folder) / "console-run.png"))


def downloaded(folder: Path, name: str) -> bytes | None:
    path = folder / name
    done = path.exists() and not list(folder.glob("*.crdownload"))
    return path.read_bytes() if done else None


async def test_watch_a_run_approve_its_call_and_see_it_finish(
    console: Console,
    browser: WebDriver,
    downloads: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    await asyncio.to_thread(enter, browser, console.url, console.tokens["approver"])
    run_id = await console.start(
        [
            [
                {"kind": "chunk", "text": "Counting with the shell."},
                call("shell", command=f"seq 1 {COUNT}"),
            ],
            say(f"Counted to {COUNT}."),
        ],
        prompt=f"count to {COUNT}",
        allow_shell=True,
    )
    row = f'tr[data-run-id="{run_id}"]'
    # Live on the list: it appears, then waits for a decision.
    await asyncio.to_thread(
        wait_for, browser, f'{row}[data-status="awaiting_approval"]', timeout=60
    )
    assert text_of(browser, f"{row} td.prompt") == f"count to {COUNT}"
    assert text_of(browser, f"{row} td.agent") == "default"
    # The filters: by status, then by agent.
    status = Select(browser.find_element(By.ID, "f-status"))
    status.select_by_visible_text("completed")
    await asyncio.to_thread(wait_for, browser, row, gone=True)
    status.select_by_visible_text("awaiting_approval")
    await asyncio.to_thread(wait_for, browser, row)
    browser.find_element(By.ID, "f-agent").send_keys("nobody")
    await asyncio.to_thread(wait_for, browser, row, gone=True)
    browser.find_element(By.ID, "f-clear").click()
    await asyncio.to_thread(wait_for, browser, row)
    status.select_by_visible_text("awaiting_approval")
    screenshot(browser, tmp_path_factory, "console-list")

    await asyncio.to_thread(open_run, browser, run_id)
    (asked,) = [a for a in await console.approvals(run_id) if a["status"] == "pending"]
    card = f'#approvals .card[data-id="{asked["approval_id"]}"]'
    await asyncio.to_thread(wait_for, browser, card)
    assert f"seq 1 {COUNT}" in text_of(browser, f"{card} .args")
    call_item = '#timeline li[data-kind="tool.call"]'
    await asyncio.to_thread(wait_for, browser, f'{call_item} .gate[data-gate="ask"]')
    assert f"seq 1 {COUNT}" in text_of(browser, f"{call_item} .args")
    assert "asks an operator" in text_of(browser, f"{call_item} .gate")
    assert "Counting with the shell." in text_of(browser, "#timeline .model-text")
    screenshot(browser, tmp_path_factory, "console-run-parked")

    browser.find_element(By.CSS_SELECTOR, f"{card} .note").send_keys("looked at it")
    browser.find_element(By.CSS_SELECTOR, f'{card} button[data-decision="allow_once"]').click()
    await asyncio.to_thread(status_is, browser, "completed")
    await asyncio.to_thread(wait_for, browser, f'{call_item} .gate[data-gate="approved"]')
    assert "approved (allow_once) by token:con-approver" in text_of(browser, f"{call_item} .gate")
    await asyncio.to_thread(wait_for, browser, f"{call_item} .offloaded[data-ref]")
    assert "stored as" in text_of(browser, f"{call_item} .result")  # the digest
    assert text_of(browser, "#run-answer") == f"Counted to {COUNT}."
    assert "input tokens" in text_of(browser, "#run-usage")
    # The approver's decision, made through the page, is the approvals service's record.
    (decided,) = await console.approvals(run_id)
    assert (decided["decision"], decided["decided_by"], decided["note"]) == (
        "allow_once",
        "token:con-approver",
        "looked at it",
    )
    # The trace link: the run's trace id (from its first event) in the configured URL.
    trace_id = (await console.events(run_id))[0]["data"]["trace_id"]
    link = browser.find_element(By.ID, "trace-link").get_attribute("href")
    assert link == f"http://traces.example/trace/{trace_id}?run={run_id}"
    # The stored output downloads whole, with the token sent in a header, not a URL.
    offloaded = browser.find_element(By.CSS_SELECTOR, f"{call_item} .offloaded")
    ref = offloaded.get_attribute("data-ref")
    assert ref
    offloaded.find_element(By.CSS_SELECTOR, "button.download").click()
    await asyncio.to_thread(wait_until, browser, lambda _: downloaded(downloads, ref) is not None)
    expected = "".join(f"{i}\n" for i in range(1, COUNT + 1)).encode()
    stored = downloaded(downloads, ref)
    assert stored is not None
    assert stored.startswith(b"exit code 0")  # the shell's result as stored, whole
    assert stored.endswith(expected)
    # Nothing the browser went to carries the token (it lives in sessionStorage only).
    assert console.tokens["approver"] not in browser.current_url
    visited = browser.execute_script(
        "return performance.getEntriesByType('resource').map((e) => e.name)"
    )
    assert visited
    assert not [url for url in visited if console.tokens["approver"] in url]
    # An approver may not read audit trails: the page says so rather than guessing.
    assert "audit.read" in text_of(browser, "#audit-state")
    screenshot(browser, tmp_path_factory, "console-run-approver")

    # The admin sees the trail verified.
    await asyncio.to_thread(enter, browser, console.url, ADMIN)
    await asyncio.to_thread(open_run, browser, run_id)
    await asyncio.to_thread(wait_for, browser, "#audit-state .audit-ok")
    assert text_of(browser, "#audit-state").startswith("verified: intact")
    await asyncio.to_thread(wait_for, browser, f"{call_item} .offloaded[data-ref]")
    assert no_violations(browser) == []
    screenshot(browser, tmp_path_factory, "console-run")
    readme_shot(browser)


async def test_a_viewer_cannot_decide_and_an_operator_messages_and_stops(
    console: Console, browser: WebDriver, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run_id = await console.start(
        [[call("shell", command="seq 1 3")], say("never reached")], allow_shell=True
    )
    assert (await console.events(run_id))[-1]["kind"] == "tool.approval_needed"
    (asked,) = await console.approvals(run_id)
    card = f'#approvals .card[data-id="{asked["approval_id"]}"]'

    await asyncio.to_thread(enter, browser, console.url, console.tokens["viewer"])
    await asyncio.to_thread(wait_for, browser, f'tr[data-run-id="{run_id}"]')
    await asyncio.to_thread(open_run, browser, run_id)
    await asyncio.to_thread(wait_for, browser, card)
    browser.find_element(By.CSS_SELECTOR, f'{card} button[data-decision="allow_once"]').click()
    await asyncio.to_thread(
        wait_until, browser, lambda d: "forbidden" in text_of(d, f"{card} .card-error")
    )
    assert (await console.run(run_id))["status"] == "awaiting_approval"
    assert (await console.approvals(run_id))[0]["status"] == "pending"

    await asyncio.to_thread(enter, browser, console.url, console.tokens["operator"])
    await asyncio.to_thread(wait_for, browser, f'tr[data-run-id="{run_id}"]')
    await asyncio.to_thread(open_run, browser, run_id)
    browser.find_element(By.ID, "message-text").send_keys("and then stop")
    browser.find_element(By.ID, "send-message").click()
    await asyncio.to_thread(
        wait_until, browser, lambda d: "message queued" in text_of(d, "#steer-result")
    )
    browser.find_element(By.ID, "stop-run").click()
    await asyncio.to_thread(status_is, browser, "stopped")
    await asyncio.to_thread(wait_for, browser, '#timeline li[data-kind="run.end"]', timeout=60)
    assert (await console.run(run_id))["stop_reason"] == "stop_requested"
    assert (await console.approvals(run_id))[0]["status"] == "withdrawn"
    screenshot(browser, tmp_path_factory, "console-run-stopped")


# Each would set `window.__xss` (or add an element) if the page ever parsed it as HTML.
PAYLOADS = [
    "<script>window.__xss=1</script>",
    "<img src=x onerror=window.__xss=2>",
    '"><svg onload=window.__xss=3>',
    "'><iframe src=javascript:parent.__xss=4></iframe>",
    "<a href=javascript:window.__xss=5 id=xss-link>click</a>",
    "</pre><script>window.__xss=6</script><pre>",
    "</style><script>window.__xss=7</script>",
    "<math><mtext><table><mglyph><style><img src=x onerror=window.__xss=8>",
    "&lt;script&gt;window.__xss=9&lt;/script&gt;",
    "<details open ontoggle=window.__xss=10>",
    "<body onload=window.__xss=11>",
    "\u2028<script>window.__xss=12</script>\u2029",
    "javascript:window.__xss=13",
    "{{constructor.constructor('window.__xss=14')()}}",
    "<object data=javascript:window.__xss=15>",
    "<input autofocus onfocus=window.__xss=16>",
]
TEXT = "\n".join(PAYLOADS)
# What `echo '…'` can carry (no single quote).
SHELL_TEXT = " ".join(p for p in PAYLOADS if "'" not in p and "\u2028" not in p)
# The console's own elements are not injected ones: the approval card's "edit or
# respond" box is a `details.answers`.
INJECTED = "main img, main svg, main iframe, main script, main details:not(.answers), main math, main object, main input[autofocus], main style, #xss-link"


def nothing_ran(driver: WebDriver) -> None:
    assert driver.execute_script("return window.__xss") is None
    assert driver.find_elements(By.CSS_SELECTOR, INJECTED) == []
    assert len(driver.find_elements(By.TAG_NAME, "script")) == 1  # the page's own
    assert driver.execute_script("return window.__violations") == []


async def test_payloads_are_shown_as_text_and_never_run(
    console: Console, browser: WebDriver, tmp_path_factory: pytest.TempPathFactory
) -> None:
    await asyncio.to_thread(enter, browser, console.url, ADMIN)
    run_id = await console.start(
        [
            [
                {"kind": "thinking", "text": TEXT},
                {"kind": "chunk", "text": TEXT},
                call("calculate", expression=TEXT),
            ],
            [{"kind": "chunk", "text": TEXT}, call("shell", command=f"echo '{SHELL_TEXT}'")],
            say(TEXT),
        ],
        prompt=TEXT,
        allow_shell=True,
    )
    row = f'tr[data-run-id="{run_id}"]'
    await asyncio.to_thread(
        wait_for, browser, f'{row}[data-status="awaiting_approval"]', timeout=60
    )
    listed = browser.find_element(By.CSS_SELECTOR, f"{row} td.prompt").get_attribute("title")
    assert listed == shown(TEXT[:200])  # the listing's first 200 characters
    nothing_ran(browser)

    await asyncio.to_thread(open_run, browser, run_id)
    await asyncio.to_thread(wait_for, browser, "#approvals .card[data-id]")
    card_args = text_of(browser, "#approvals .card .args")
    assert json.loads(card_args) == {"command": f"echo '{SHELL_TEXT}'"}
    nothing_ran(browser)
    browser.find_element(
        By.CSS_SELECTOR, '#approvals .card button[data-decision="allow_once"]'
    ).click()
    await asyncio.to_thread(status_is, browser, "completed")
    await asyncio.to_thread(wait_for, browser, '#timeline li[data-kind="run.end"]')

    # As text, with the line and paragraph separators (U+2028, U+2029) shown escaped.
    assert browser.find_element(By.ID, "run-prompt").get_attribute("textContent") == shown(TEXT)
    assert browser.find_element(By.ID, "run-answer").get_attribute("textContent") == shown(TEXT)
    texts = [
        e.get_attribute("textContent")
        for e in browser.find_elements(By.CSS_SELECTOR, ".model-text")
    ]
    # Two steps' text (each with the calls it made, described) and the answer.
    assert len(texts) == 3
    assert all((t or "").startswith(shown(TEXT)) for t in texts)
    thinking = browser.find_element(By.CSS_SELECTOR, ".model-thinking").get_attribute("textContent")
    assert thinking == shown(TEXT)
    results = [
        e.get_attribute("textContent") or ""
        for e in browser.find_elements(By.CSS_SELECTOR, ".result")
    ]
    assert any(SHELL_TEXT in r for r in results)  # echo's output, as text
    nothing_ran(browser)
    screenshot(browser, tmp_path_factory, "console-escaping")


async def test_invisible_code_points_are_shown_escaped(
    console: Console, browser: WebDriver, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Names with bidi controls, zero-width characters, tag characters … in the prompt,
    the model's text, a call's arguments and the answer read as what they are."""
    names = [name for name, _ in SERVICE_CORPUS]
    seen = [s for _, s in SERVICE_CORPUS]
    text, text_seen = "\n".join(names), "\n".join(seen)
    await asyncio.to_thread(enter, browser, console.url, ADMIN)
    run_id = await console.start(
        [
            [{"kind": "chunk", "text": text}, call("calculate", expression=names[0])],
            say(text),
        ],
        prompt=text,
    )
    row = f'tr[data-run-id="{run_id}"]'
    await asyncio.to_thread(wait_for, browser, f'{row}[data-status="completed"]', timeout=60)
    (prompt,) = texts_of(browser, f"{row} td.prompt")
    assert prompt.startswith("invoice⟨U+202E⟩gpj.sh")
    title = browser.find_element(By.CSS_SELECTOR, f"{row} td.prompt").get_attribute("title")
    assert title
    assert INVISIBLE.search(title) is None
    await asyncio.to_thread(open_run, browser, run_id)
    await asyncio.to_thread(wait_for, browser, '#timeline li[data-kind="run.end"]')
    assert texts_of(browser, "#run-prompt") == [text_seen]
    assert texts_of(browser, "#run-answer") == [text_seen]
    assert texts_of(browser, ".model-text")[0].startswith(text_seen)
    (args,) = texts_of(browser, '#timeline li[data-kind="tool.call"] .args')
    assert '"expression": "invoice⟨U+202E⟩gpj.sh"' in args
    assert INVISIBLE.search("".join(texts_of(browser, "main"))) is None
    screenshot(browser, tmp_path_factory, "console-invisible")


async def test_the_page_is_served_locked_down(stack: Supervisor) -> None:
    async with httpx.AsyncClient(base_url=stack.child("brain").url, timeout=30) as http:
        page = await http.get("/console")
        # Without a token: the page only (no data), with a hash-only script policy.
        assert page.status_code == 200
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy
        assert "frame-ancestors 'none'" in policy
        script_src = next(p for p in policy.split(";") if p.strip().startswith("script-src"))
        sources = script_src.split()[1:]
        assert sources
        assert all(s.startswith("'sha256-") for s in sources)
        assert "unsafe" not in policy
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["cache-control"] == "no-store"
        assert page.text == assemble()  # the static document, whoever asks
        # The data behind it needs a token like every route.
        for path in (
            "/v1/console/settings",
            "/v1/runs/run_x/approvals",
            "/v1/approvals",
            "/v1/approvals/events",
        ):
            refused = await http.get(path)
            assert refused.status_code == 401, path
            assert refused.json()["error"]["code"] == "unauthenticated"
        allowed = await http.get(
            "/v1/console/settings", headers={"Authorization": f"Bearer {ADMIN}"}
        )
        assert allowed.status_code == 200


async def test_the_list_filters_by_agent_and_time(console: Console) -> None:
    run_id = await console.start([say("hello")], prompt="filter me")
    created = datetime.fromisoformat((await console.run(run_id))["created_at"])
    later = created + timedelta(seconds=1)

    async def listed(**query: str) -> dict[str, dict[str, Any]]:
        found = await console.http.get("/v1/runs", params=query | {"limit": "500"})
        assert found.status_code == 200, found.text
        return {r["run_id"]: r for r in found.json()["runs"]}

    mine = await listed(agent="default", since=created.isoformat())
    assert mine[run_id]["agent"] == "default"  # a run started without an agent: the default
    assert run_id not in await listed(agent="someone-else")
    assert run_id not in await listed(since=later.isoformat())
    assert run_id in await listed(since=created.isoformat(), before=later.isoformat())
    assert run_id not in await listed(before=created.isoformat())


def test_artefacts_go_where_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.setenv("TETHER_TEST_ARTEFACTS", str(tmp_path / "shots"))
    assert artefacts_dir(tmp_path_factory) == tmp_path / "shots"
    monkeypatch.delenv("TETHER_TEST_ARTEFACTS")
    assert artefacts_dir(tmp_path_factory).parent == tmp_path_factory.getbasetemp()


# ---- one console: runs and approvals, one sign-in -----------------------------------

BOARD = "#board"


def board_card(approval_id: str) -> str:
    return f'{BOARD} .card[data-id="{approval_id}"]'


def open_approvals(driver: WebDriver) -> None:
    driver.find_element(By.ID, "nav-approvals").click()
    wait_until(driver, lambda d: d.find_element(By.ID, "board").is_displayed())


async def present(bus: Bus, agent: str) -> int:
    route = bus.subjects.approval_presence
    reply: Presence = await bus.request(route, PresenceQuery(agent=agent))
    return reply.approvers


async def eventually_present(bus: Bus, agent: str, wanted: bool) -> None:
    """Whether an approver for `agent` is connected, within the presence TTL (15 s)."""
    await until(
        lambda: present(bus, agent),
        done=lambda count: (count > 0) == wanted,
        timeout=WAIT_S,
        every=0.2,
        what=f"an approver for {agent} present: {wanted}",
    )


async def test_one_sign_in_sees_runs_and_approvals_and_a_decision_resumes_the_run(
    console: Console,
    browser: WebDriver,
    stack_bus: Bus,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    token = console.tokens["approver"]
    await asyncio.to_thread(enter, browser, console.url, token)
    # The open console is an operator present, as the approvals page's stream was.
    await eventually_present(stack_bus, "default", True)
    run_id = await console.start(
        [[call("shell", command="seq 1 5")], say("Counted to 5.")],
        prompt="count to 5",
        allow_shell=True,
    )
    row = f'tr[data-run-id="{run_id}"]'
    await asyncio.to_thread(
        wait_for, browser, f'{row}[data-status="awaiting_approval"]', timeout=60
    )
    (asked,) = await console.approvals(run_id)
    card = board_card(asked["approval_id"])
    # The tab counts pending requests from any view; the Approvals view shows the card.
    await asyncio.to_thread(wait_until, browser, lambda d: text_of(d, "#pending-count") != "")
    await asyncio.to_thread(open_approvals, browser)
    await asyncio.to_thread(wait_for, browser, card)
    assert "seq 1 5" in text_of(browser, f"{card} .args")
    assert "danger:" in text_of(browser, card)
    assert text_of(browser, f"{card} .run a") == run_id  # a link to the run's page
    screenshot(browser, tmp_path_factory, "console-approvals")

    browser.find_element(By.CSS_SELECTOR, f"{card} .note").send_keys("from the board")
    browser.find_element(By.CSS_SELECTOR, f'{card} button[data-decision="allow_once"]').click()
    await asyncio.to_thread(wait_for, browser, card, gone=True)
    browser.find_element(By.ID, "nav-runs").click()
    await asyncio.to_thread(wait_for, browser, f'{row}[data-status="completed"]', timeout=60)
    (decided,) = await console.approvals(run_id)
    assert (decided["decision"], decided["decided_by"], decided["note"]) == (
        "allow_once",
        "token:con-approver",
        "from the board",
    )
    # One token, typed once, kept in the tab only: never a URL, cookie or localStorage.
    kept = browser.execute_script(
        "return [sessionStorage.getItem('tether.console.token'), localStorage.length]"
    )
    assert kept == [token, 0]
    assert browser.get_cookies() == []
    visited = browser.execute_script(
        "return performance.getEntriesByType('resource').map((e) => e.name)"
    )
    assert not [url for url in [browser.current_url, *visited] if token in url]
    assert all(url.startswith(console.url) for url in visited)  # this origin only
    assert no_violations(browser) == []
    browser.find_element(By.ID, "signout").click()
    await eventually_present(stack_bus, "default", False)


async def tenant_token(console: Console, name: str, tenant: str) -> str:
    made = await console.http.post(
        "/v1/tokens", json={"name": name, "role": "approver", "tenant": tenant}
    )
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


async def ask(bus: Bus, tenant: str, command: str) -> ApprovalView:
    body = CreateApproval(
        run_id=f"run_{tenant}_{command.split()[-1]}",
        step=1,
        tool="shell",
        args={"command": command},
        reason="asks a person",
        action_digest=uuid.uuid4().hex,
        expires_in_s=120,
        tenant=tenant,
    )
    reply: ApprovalView = await bus.request(bus.subjects.approval_create, body)
    return reply


async def test_a_tenant_token_sees_and_decides_only_its_tenant_approvals(
    console: Console, browser: WebDriver, stack_bus: Bus
) -> None:
    token_a = await tenant_token(console, "con-tenant-a", "con-ta")
    token_b = await tenant_token(console, "con-tenant-b", "con-tb")
    await asyncio.to_thread(enter, browser, console.url, token_a)
    await asyncio.to_thread(open_approvals, browser)
    theirs = await ask(stack_bus, "con-tb", "echo theirs")
    mine = await ask(stack_bus, "con-ta", "echo mine")
    # Live, in order: A's arrives after B's was created, and B's never shows.
    await asyncio.to_thread(wait_for, browser, board_card(mine.approval_id))
    assert browser.find_elements(By.CSS_SELECTOR, board_card(theirs.approval_id)) == []
    # And after a reload (the list, not the stream), still A's only.
    browser.refresh()
    await asyncio.to_thread(wait_for, browser, board_card(mine.approval_id))
    assert browser.find_elements(By.CSS_SELECTOR, board_card(theirs.approval_id)) == []
    assert "echo theirs" not in text_of(browser, "main")

    # Through the brain's routes, B's token reaches nothing of A's: not listed, and a
    # decision answers 404 like a request that does not exist.
    async with httpx.AsyncClient(base_url=console.url, timeout=WAIT_S) as http:
        for status in ("pending", "all"):
            listed = await http.get(
                "/v1/approvals", params={"status": status}, headers=bearer(token_b)
            )
            assert listed.status_code == 200, listed.text
            ids = {a["approval_id"] for a in listed.json()["approvals"]}
            assert theirs.approval_id in ids
            assert mine.approval_id not in ids
            assert "con-ta" not in listed.text
        for approval_id, expected in ((mine.approval_id, 404), ("apr_nothing", 404)):
            refused = await http.post(
                f"/v1/approvals/{approval_id}/decision",
                json={"decision": "allow_once"},
                headers=bearer(token_b),
            )
            assert refused.status_code == expected, refused.text
            assert refused.json()["error"]["code"] == "not_found"
    # A's own token decides A's card through the page.
    card = board_card(mine.approval_id)
    browser.find_element(By.CSS_SELECTOR, f'{card} button[data-decision="deny"]').click()
    await asyncio.to_thread(wait_for, browser, card, gone=True)
    denied = await console.http.get("/v1/approvals?status=all&limit=1000")
    (row,) = [a for a in denied.json()["approvals"] if a["approval_id"] == mine.approval_id]
    assert (row["status"], row["decided_by"]) == ("denied", "token:con-tenant-a")


async def test_the_approvals_console_leads_to_the_unified_one(
    console: Console, stack: Supervisor, browser: WebDriver, stack_bus: Bus
) -> None:
    approvals_url = stack.child("approvals").url
    target = f"{console.url}/console#/approvals"
    async with httpx.AsyncClient(base_url=approvals_url, timeout=WAIT_S) as http:
        for path, expected in (
            ("/console", target),
            ("/", target),
            ("/?approval=apr_0123abcd", f"{target}/apr_0123abcd"),  # a notice's link
        ):
            moved = await http.get(path)
            assert moved.status_code == 303, (path, moved.text)
            assert moved.headers["location"] == expected
            assert moved.headers["cache-control"] == "no-store"
        # Only an id goes into the address it leads to.
        for hostile in ("javascript:alert(1)", "x#y", "a/b", "a\r\nSet-Cookie:x=1", "<b>"):
            refused = await http.get("/", params={"approval": hostile})
            assert refused.status_code == 422, hostile
            assert "location" not in refused.headers

    token = console.tokens["approver"]
    asked = await ask(stack_bus, "default", "echo led-here")
    browser.get("about:blank")
    browser.get(f"{approvals_url}/?approval={asked.approval_id}")
    await asyncio.to_thread(
        wait_until, browser, lambda d: d.current_url.startswith(f"{console.url}/console")
    )
    if browser.find_elements(By.CSS_SELECTOR, "#signout:not([hidden])"):
        browser.find_element(By.ID, "signout").click()
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "signin").click()
    card = board_card(asked.approval_id)
    await asyncio.to_thread(wait_for, browser, f"{card}.focus")  # the notice's request
    assert browser.find_element(By.ID, "board").is_displayed()
    assert not browser.find_element(By.ID, "list-view").is_displayed()
    assert browser.current_url == f"{console.url}/console#/approvals/{asked.approval_id}"
    browser.find_element(By.CSS_SELECTOR, f'{card} button[data-decision="deny"]').click()
    await asyncio.to_thread(wait_for, browser, card, gone=True)


async def test_the_schedules_view_shows_next_tick_and_last_run(
    console: Console, browser: WebDriver
) -> None:
    """A viewer sees each schedule's next tick and its last run (a link to the run's
    page); what the schedule's writer typed is shown as text."""
    name = '<img src=x onerror="window.__pwned=1">sched'
    model = write_script(console.scripts, [say("scheduled hello")])
    body = {"prompt": "scheduled", "provider": "scripted", "model": model, "interval_s": 2}
    made = await console.http.post("/v1/schedules", json=body | {"name": name})
    assert made.status_code == 201, made.text
    schedule_id = made.json()["schedule_id"]
    try:
        enter(browser, console.url, console.tokens["viewer"])
        browser.find_element(By.ID, "nav-schedules").click()
        row = f'tr[data-schedule-id="{schedule_id}"]'
        wait_for(browser, f"{row} td.last a", timeout=60)
        assert name in texts_of(browser, f"{row} td")
        assert text_of(browser, f"{row} td.next") not in ("", "paused")
        assert browser.execute_script("return window.__pwned") is None
        assert not browser.find_elements(By.CSS_SELECTOR, "#schedules-view img")
        browser.find_element(By.CSS_SELECTOR, f"{row} td.last a").click()
        wait_until(browser, lambda d: (text_of(d, "#run-title") or "").startswith("run_"))
        assert no_violations(browser) == []
    finally:
        removed = await console.http.delete(f"/v1/schedules/{schedule_id}")
        assert removed.status_code == 204, removed.text
