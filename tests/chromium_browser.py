"""Headless Chromium for the tests of the operator pages (the approvals console, the runs
console): Debian's chromium and chromedriver driven by Selenium, never a downloaded
browser; waiting helpers; sign-in through a page's token form; screenshots kept as test
artefacts (in `$TETHER_TEST_ARTEFACTS`, else under pytest's temporary folder)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Generous: the CI machine is slow and shared; a wait ends as soon as its condition holds.
WAIT_S = 30.0


def require_chromium() -> None:
    """CI installs them (.ci/run); elsewhere the failure names the packages."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail(
            "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
        )


@contextmanager
def chromium(profile: Path, *, downloads: Path | None = None) -> Iterator[WebDriver]:
    """A headless Chromium with its own profile folder; files it downloads land in
    `downloads` when given."""
    require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    if downloads is not None:
        options.add_experimental_option(
            "prefs",
            {"download.default_directory": str(downloads), "download.prompt_for_download": False},
        )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SE_OFFLINE", "true")  # Selenium Manager must never download a browser
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        if downloads is not None:
            driver.execute_cdp_cmd(
                "Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
            )
        yield driver
    finally:
        driver.quit()


def wait_until(
    driver: WebDriver, condition: Callable[[WebDriver], object], timeout: float = WAIT_S
) -> None:
    """Poll `condition`; an element redrawn between finding and reading it (a live page
    replaces a card when a vote lands) is not a failure, only a reason to look again."""
    WebDriverWait(
        driver,
        timeout,
        poll_frequency=0.1,
        ignored_exceptions=(NoSuchElementException, StaleElementReferenceException),
    ).until(condition)


def text_of(driver: WebDriver, css: str) -> str:
    """The visible text of the first element matching `css`, found and read in one script
    call, so a redraw between the two cannot leave a stale element behind."""
    text = driver.execute_script(
        "const e = document.querySelector(arguments[0]);"
        " return e === null ? null : e.innerText.trim();",
        css,
    )
    if text is None:
        raise NoSuchElementException(f"nothing matches {css}")
    return str(text)


def texts_of(driver: WebDriver, css: str) -> list[str]:
    """What a reader sees of every element matching `css` (`innerText`: the rendered
    text, no markup), read in one script call."""
    found = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText)", css
    )
    return [str(text) for text in found]


def wait_for(driver: WebDriver, css: str, *, gone: bool = False, timeout: float = WAIT_S) -> None:
    def check(d: WebDriver) -> bool:
        return bool(d.find_elements(By.CSS_SELECTOR, css)) != gone

    wait_until(driver, check, timeout)


def sign_in(driver: WebDriver, url: str, token: str) -> None:
    """Type `token` into the page's sign-in form; wait until the page says it is live."""
    driver.get(url)
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "signin").click()
    wait_until(driver, lambda d: text_of(d, "#status") == "live")


def artefacts_dir(factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: `$TETHER_TEST_ARTEFACTS`, else a folder of this session's
    pytest temporary tree."""
    named = os.environ.get("TETHER_TEST_ARTEFACTS")
    if named:
        folder = Path(named)
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    return factory.getbasetemp() / "artefacts"


def screenshot(driver: WebDriver, factory: pytest.TempPathFactory, name: str) -> Path:
    folder = artefacts_dir(factory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot written to {path}"
    return path
