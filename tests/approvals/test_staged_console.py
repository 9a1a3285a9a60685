"""A staged effect on the approvals console (real headless Chromium): the card shows the
change set (paths, the diff with its lines marked, a binary file's sizes and digest, the
command's output), and all of it, attacker-controlled text, stays text."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from chromium_browser import chromium, sign_in, wait_for
from tether_approvals.testing import ApprovalsHarness
from tether_common.messages.staging import ChangeEntry, ChangeSet

XSS = '<img src=x onerror="window.__pwned=1">'


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


def hostile_set() -> ChangeSet:
    diff = f"--- a/x.html\n+++ b/x.html\n@@ -1 +1 @@\n-old line\n+{XSS}\n"
    return ChangeSet(
        digest="ab" * 32,
        tool="shell",
        entries=[
            ChangeEntry(
                path=f"pages/{XSS}.html", change="modified", type="text", base="c" * 64,
                digest="d" * 64, size_before=9, size_after=40, mode=0o644, diff=diff,
            ),
            ChangeEntry(
                path="out/blob.bin", change="created", type="binary", base="absent",
                digest="e" * 64, size_after=9, mode=0o644,
            ),
            ChangeEntry(path="old.log", change="deleted", type="text", base="f" * 64, size_before=6),
        ],
        output=f"exit code 0\n{XSS}",
    )  # fmt: skip


async def test_the_card_shows_the_change_set_as_text(
    approvals: ApprovalsHarness, browser: WebDriver
) -> None:
    token = await approvals.token("approver", agents=["stage-bot"])
    await asyncio.to_thread(sign_in, browser, approvals.url, token)
    created = await approvals.create(agent="stage-bot", changes=hostile_set())
    card = f'.card[data-id="{created.approval_id}"]'
    await asyncio.to_thread(wait_for, browser, card)
    element = browser.find_element(By.CSS_SELECTOR, card)
    shown = element.find_element(By.CSS_SELECTOR, ".changes")
    assert "Approving applies exactly these changes (3; digest abababababab)" in shown.text
    entries = [e.text for e in shown.find_elements(By.CSS_SELECTOR, ".entry")]
    assert entries[0] == f"modified pages/{XSS}.html"
    assert entries[1] == f"created out/blob.bin (binary, - → 9 bytes, sha256 {'e' * 64})"
    assert entries[2] == "deleted old.log"
    marked = [
        (s.get_attribute("class"), s.text)
        for s in shown.find_elements(By.CSS_SELECTOR, ".diff span")
    ]
    assert ("add", f"+{XSS}") in marked
    assert ("del", "-old line") in marked
    assert ("hunk", "@@ -1 +1 @@") in marked
    assert XSS in shown.find_element(By.CSS_SELECTOR, ".output").text
    assert element.find_elements(By.CSS_SELECTOR, "img") == []
    assert browser.execute_script("return window.__pwned === undefined")
