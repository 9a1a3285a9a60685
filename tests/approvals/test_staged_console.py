"""A staged effect on the approvals console (real headless Chromium): the card shows the
change set (paths, the diff with its lines marked, a binary file's sizes and digest, the
command's output), and all of it, attacker-controlled text, stays text; invisible and
reordering code points in any of it (a path `invoice\u202egpj.sh`) are shown escaped,
exactly as `tether_common.display` defines."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By

from chromium_browser import chromium, sign_in, texts_of, wait_for
from display_corpus import SERVICE_CORPUS
from tether_approvals.testing import ApprovalsHarness
from tether_common import display
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


def enter(driver: WebDriver, url: str, token: str) -> None:
    """Signed in with `token` (a session an earlier test left is signed out first)."""
    driver.get(url)
    if driver.find_elements(By.CSS_SELECTOR, "#signout:not([hidden])"):
        driver.find_element(By.ID, "signout").click()
    sign_in(driver, url, token)


async def test_invisible_code_points_are_shown_escaped_on_the_card(
    approvals: ApprovalsHarness, browser: WebDriver
) -> None:
    names = [name for name, _ in SERVICE_CORPUS]
    seen = [shown for _, shown in SERVICE_CORPUS]
    changes = ChangeSet(
        digest="cd" * 32,
        tool="shell",
        entries=[
            ChangeEntry(
                path=name, change="created", type="text", base="absent", digest="d" * 64,
                size_after=len(name), mode=0o644, diff=f"@@ -0,0 +1 @@\n+{name}\n",
            )
            for name in names
        ],
        output="\n".join(names),
    )  # fmt: skip
    args = {"command": f"touch {names[0]}", names[3]: names[9]}
    token = await approvals.token("approver", agents=["stage-bot"])
    await asyncio.to_thread(enter, browser, approvals.url, token)
    created = await approvals.create(
        agent="stage-bot", args=args, reason=f"writes {names[0]}", changes=changes
    )
    card = f'.card[data-id="{created.approval_id}"]'
    await asyncio.to_thread(wait_for, browser, card)
    assert texts_of(browser, f"{card} .entry") == [f"created {s}" for s in seen]
    assert texts_of(browser, f"{card} .diff .add") == [f"+{s}\n" for s in seen]
    assert texts_of(browser, f"{card} .output") == ["\n".join(seen)]
    assert texts_of(browser, f"{card} .reason") == ["writes invoice⟨U+202E⟩gpj.sh"]
    assert texts_of(browser, f"{card} .args") == [
        display.shown(json.dumps(args, indent=2, ensure_ascii=False))
    ]
    assert display.INVISIBLE.search("".join(texts_of(browser, card))) is None


async def test_the_page_escapes_exactly_the_class_python_escapes(
    approvals: ApprovalsHarness, browser: WebDriver
) -> None:
    """The page's own `shown` over every code point: the ranges it escapes are the ones
    `tether_common.display` defines, each written the same way."""
    browser.get(approvals.url)
    found = browser.execute_script(
        """
        const ranges = [];
        for (let code = 0; code < 0x110000; code++) {
          const one = String.fromCodePoint(code);
          if (shown(one) === one) continue;
          const last = ranges[ranges.length - 1];
          if (last && last[1] === code - 1) last[1] = code; else ranges.push([code, code]);
        }
        return [ranges, shown("a\\u202eb\\u{E0041}\\u{10FFFD}\\uD800")];
        """
    )
    ranges, sample = found
    assert [tuple(r) for r in ranges] == sorted([*display.RANGES, (0x27E8, 0x27E8)])
    assert sample == display.shown("a\u202eb\U000e0041\U0010fffd\ud800")
