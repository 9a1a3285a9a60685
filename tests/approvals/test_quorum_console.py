"""The console shows a quorum's progress ("1 of 2 approved", by whom, the group) in a real
headless Chromium, updates it when someone else votes, and the second approval there
decides the request."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from chromium_browser import chromium, sign_in, text_of, wait_for, wait_until
from tether_approvals.testing import ApprovalsHarness


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


def quorum_text(driver: WebDriver, card: str) -> str:
    return text_of(driver, f"{card} .quorum-box")


async def test_console_shows_one_of_two_and_who(
    approvals: ApprovalsHarness, browser: WebDriver
) -> None:
    mine = await approvals.token("approver", agents=["quorum-bot"], groups=["sre"])
    other = await approvals.token("approver", groups=["sre"])
    await asyncio.to_thread(sign_in, browser, approvals.url, mine)

    created = await approvals.create(agent="quorum-bot", quorum={"needed": 2, "group": "sre"})
    card = f'.card[data-id="{created.approval_id}"]'
    await asyncio.to_thread(wait_for, browser, card)
    first = quorum_text(browser, card)
    assert "0 of 2 approved" in first
    assert "group: sre" in first

    voted = await approvals.decide(created.approval_id, "allow_once", other)
    assert voted.status_code == 200, voted.text
    await asyncio.to_thread(
        wait_until, browser, lambda d: "1 of 2 approved" in quorum_text(d, card)
    )
    assert "by token:approver-" in quorum_text(browser, card)

    button = f'{card} button[data-decision="allow_once"]'
    browser.find_element(By.CSS_SELECTOR, button).click()
    await asyncio.to_thread(wait_for, browser, card, gone=True)
    decided = await approvals.decided(created.approval_id)
    assert decided.decision == "allow_once"
    assert len(decided.approvers) == 2
