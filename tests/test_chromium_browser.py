"""The browser helpers read a live page safely: an element the page keeps redrawing is
read without a stale-element error, and a wait keeps polling through redraws."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.chrome.webdriver import WebDriver

from chromium_browser import chromium, text_of, wait_until

# A box replaced every millisecond (as the consoles replace a card when a vote lands); the
# browser clamps the interval to about 4 ms, faster than a WebDriver round trip.
REDRAWN = """<!doctype html><html><body><div id="box">0</div><script>
let n = 0;
setInterval(() => {
  n += 1;
  const box = document.createElement("div");
  box.id = "box";
  box.textContent = String(n);
  document.getElementById("box").replaceWith(box);
}, 1);
</script></body></html>"""
READS = 300


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    folder = tmp_path_factory.mktemp("redrawn")
    html = folder / "redrawn.html"
    html.write_text(REDRAWN)
    with chromium(folder / "profile") as driver:
        driver.get(Path(html).as_uri())
        yield driver


def test_text_of_never_reads_a_stale_element(page: WebDriver) -> None:
    seen = [int(text_of(page, "#box")) for _ in range(READS)]
    assert seen == sorted(seen)  # the page moved on while read, never backwards


def test_a_wait_polls_through_redraws(page: WebDriver) -> None:
    """Found, then read: at this rate nearly every such read meets a redrawn element, and
    the wait looks again instead of failing."""
    start = int(text_of(page, "#box"))
    stale = 0

    def counted(driver: WebDriver) -> bool:
        nonlocal stale
        if stale < 3:
            stale += 1
            driver.find_element("css selector", "#box").text  # noqa: B018 - the read is the test
        return int(text_of(driver, "#box")) >= start + 100

    wait_until(page, counted)
    assert stale == 3
