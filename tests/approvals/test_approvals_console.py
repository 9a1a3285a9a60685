"""The operator console in a real headless Chromium (Debian's, driven by Selenium; no
browser download): sign in, a request appears live, approve it, it leaves the list, and
the decision reaches the brain's JetStream subject."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from pydantic import ValidationError
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from chromium_browser import chromium, sign_in, wait_for
from tether_approvals.settings import ApprovalSettings
from tether_approvals.testing import ApprovalsHarness


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


async def test_console_approves_a_live_request(
    approvals: ApprovalsHarness, browser: WebDriver
) -> None:
    token = await approvals.token("approver", agents=["console-bot"])
    await asyncio.to_thread(sign_in, browser, approvals.url, token)

    created = await approvals.create(agent="console-bot", args={"command": "ls -la /srv"})
    card = f'.card[data-id="{created.approval_id}"]'
    await asyncio.to_thread(wait_for, browser, card)
    element = browser.find_element(By.CSS_SELECTOR, card)
    assert element.find_element(By.CSS_SELECTOR, ".tool").text == "shell"
    assert "ls -la /srv" in element.find_element(By.CSS_SELECTOR, ".args").text
    assert "danger: networked" in element.text
    assert "expires in" in element.find_element(By.CSS_SELECTOR, ".expiry").text
    assert created.run_id in element.text

    element.find_element(By.CSS_SELECTOR, ".note").send_keys("checked by hand")
    element.find_element(By.CSS_SELECTOR, 'button[data-decision="allow_once"]').click()
    await asyncio.to_thread(wait_for, browser, card, gone=True)

    decided = await approvals.decided(created.approval_id)
    assert (decided.decision, decided.note) == ("allow_once", "checked by hand")
    assert decided.decided_by.startswith("token:approver-")
    assert decided.action_digest == created.action_digest


async def test_console_drops_cards_decided_elsewhere(
    approvals: ApprovalsHarness, browser: WebDriver
) -> None:
    created = await approvals.create(agent="console-bot", scope="delete")
    card = f'.card[data-id="{created.approval_id}"]'
    await asyncio.to_thread(wait_for, browser, card)
    buttons = browser.find_elements(By.CSS_SELECTOR, f"{card} button[data-decision]")
    assert [b.get_attribute("data-decision") for b in buttons] == ["allow_once", "deny"]
    await approvals.decide(created.approval_id, "deny")
    await asyncio.to_thread(wait_for, browser, card, gone=True)


async def test_an_unchanged_card_is_not_drawn_again(
    approvals: ApprovalsHarness, browser: WebDriver
) -> None:
    """The list and the live stream both bring a card at sign-in; the second copy, or any
    repeat of a view already shown, leaves the card the operator is looking at in place
    (typed note, focus, the element a click is aimed at). A changed view is drawn again."""
    created = await approvals.create(agent="console-bot", args={"command": "uptime"})
    card = f'.card[data-id="{created.approval_id}"]'
    await asyncio.to_thread(wait_for, browser, card)
    same, redrawn = browser.execute_script(
        """
        const id = arguments[0], selector = arguments[1];
        const before = document.querySelector(selector);
        upsert(JSON.parse(JSON.stringify(cards.get(id).view)));
        const same = document.querySelector(selector) === before;
        const changed = Object.assign({}, cards.get(id).view, { reason: "escalated" });
        upsert(changed);
        return [same, document.querySelector(selector) !== before];
        """,
        created.approval_id,
        card,
    )
    assert same, "an unchanged view replaced the card"
    assert redrawn, "a changed view did not redraw the card"
    await approvals.decide(created.approval_id, "deny")
    await asyncio.to_thread(wait_for, browser, card, gone=True)


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "ftp://console.example/console",
        "/console",
        "http:///console",
        "https://user:secret@console.example/console",
        "https://console.example/console#/runs",
    ],
)
def test_the_console_address_is_a_plain_web_page(url: str) -> None:
    """Where `/console` leads: http(s), a host, no credentials (a Location header is not
    a place for them) and no fragment (the view's is appended)."""
    with pytest.raises(ValidationError, match="console_url"):
        ApprovalSettings(console_url=url)
    assert ApprovalSettings(console_url="https://ops.example/console").console_url


SHELL_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
    "additionalProperties": False,
}


async def test_console_edits_a_request_showing_the_diff_and_responds_to_another(
    approvals: ApprovalsHarness, browser: WebDriver
) -> None:
    """The card's edit form shows the arguments' diff as they are typed and sends an
    `edit` with them; its answer box sends a `respond` with the text."""
    edited = await approvals.create(
        agent="console-bot", args={"command": "rm -rf build"}, arguments_schema=SHELL_SCHEMA
    )
    card = f'.card[data-id="{edited.approval_id}"]'
    await asyncio.to_thread(wait_for, browser, card)
    element = browser.find_element(By.CSS_SELECTOR, card)
    element.find_element(By.CSS_SELECTOR, ".answers summary").click()
    area = element.find_element(By.CSS_SELECTOR, ".edit-args")
    area.clear()
    area.send_keys('{"command": "rm -rf build/tmp"}')
    diff = element.find_element(By.CSS_SELECTOR, ".args-diff").text
    assert '- command: "rm -rf build"' in diff
    assert '+ command: "rm -rf build/tmp"' in diff
    element.find_element(By.CSS_SELECTOR, 'button[data-answer="edit"]').click()
    await asyncio.to_thread(wait_for, browser, card, gone=True)
    decided = await approvals.decided(edited.approval_id)
    assert (decided.decision, decided.arguments) == ("edit", {"command": "rm -rf build/tmp"})

    answered = await approvals.create(agent="console-bot", args={"command": "uptime"})
    card = f'.card[data-id="{answered.approval_id}"]'
    await asyncio.to_thread(wait_for, browser, card)
    element = browser.find_element(By.CSS_SELECTOR, card)
    element.find_element(By.CSS_SELECTOR, ".answers summary").click()
    element.find_element(By.CSS_SELECTOR, ".respond-text").send_keys("it is up, 3 days")
    element.find_element(By.CSS_SELECTOR, 'button[data-answer="respond"]').click()
    await asyncio.to_thread(wait_for, browser, card, gone=True)
    decided = await approvals.decided(answered.approval_id)
    assert (decided.decision, decided.response) == ("respond", "it is up, 3 days")
