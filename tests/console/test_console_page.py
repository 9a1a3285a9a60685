"""Assembling an operator page (`tether_common.pages`): every slot filled exactly once,
the shared kit inlined with the display class from its one definition
(`tether_common.display`), no part able to end its element early, a CSP that admits
exactly the page's own inline blocks, and page scripts that put text in only through the
kit (so every piece of it is shown with invisible code points escaped). The brain and
the approvals service serve one console app, each with the views whose API it answers."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tether_approvals.api.console import assemble as approvals_console
from tether_brain.console.page import assemble as runs_console
from tether_common import display, pages

SHELL = "<style>/*a.css*/</style><script>//a.js</script>"


def test_the_runs_console_inlines_its_parts_and_the_kit() -> None:
    page = runs_console()
    (script,) = re.findall(r"<script>(.*?)</script>", page, flags=re.DOTALL)
    assert "async function readEvents(" in script  # the kit
    assert "class Timeline" in script  # the runs views
    assert "function approvalCard(" in script  # the approvals view
    for slot in ("//page_kit.js", "//console.js", "//runs.js", "//approvals.js", "/*console.css*/"):
        assert slot not in page
    assert '<body data-views="runs approvals">' in page


def test_both_services_serve_the_one_console_with_their_views() -> None:
    """The same app (one script) on both; the approvals service shows only the view whose
    API it answers, and a console with no view is refused."""
    script = re.compile(r"<script>(.*?)</script>", flags=re.DOTALL)
    assert script.findall(runs_console()) == script.findall(approvals_console())
    assert '<body data-views="approvals">' in approvals_console()
    with pytest.raises(ValueError, match="at least one view"):
        pages.console(())


def test_the_policy_admits_exactly_the_inline_blocks() -> None:
    page = pages.assemble(SHELL, {"/*a.css*/": "p{}", "//a.js": "//page_kit.js\nlet a=1;"})
    script = re.findall(r"<script>(.*?)</script>", page, flags=re.DOTALL)[0]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = pages.content_policy(page)
    assert f"script-src 'sha256-{digest}';" in policy
    assert "unsafe" not in policy


@pytest.mark.parametrize(
    ("parts", "problem"),
    [
        ({"/*a.css*/": "p{}", "//a.js": "//page_kit.js"}, None),
        ({"/*a.css*/": "p{}"}, "slots '//page_kit.js'"),  # the script never takes the kit
        ({"/*a.css*/": "p{}", "//a.js": "//page_kit.js", "//b.js": "x"}, "slots '//b.js'"),
        ({"/*a.css*/": "p{}</STYLE><script>x()", "//a.js": "//page_kit.js"}, "closes"),
        ({"/*a.css*/": "p{}", "//a.js": "//page_kit.js\n'</script>'"}, "closes"),
    ],
)
def test_a_slot_is_filled_once_and_no_part_closes_its_element(
    parts: dict[str, str], problem: str | None
) -> None:
    if problem is None:
        assert "readEvents" in pages.assemble(SHELL, parts)
        return
    with pytest.raises(ValueError, match=problem):
        pages.assemble(SHELL, parts)


@pytest.mark.parametrize("page", [runs_console, approvals_console])
def test_the_kit_takes_the_display_class_from_its_one_definition(page: Callable[[], str]) -> None:
    (script,) = re.findall(r"<script>(.*?)</script>", page(), flags=re.DOTALL)
    assert f'new RegExp({json.dumps(display.js_pattern())}, "gu")' in script
    assert "%INVISIBLE%" not in script


def test_a_kit_without_its_display_slot_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "page_kit.js"
    broken.write_text(pages.KIT.read_text().replace(pages.INVISIBLE_SLOT, '"[]"'))
    with pytest.raises(ValueError, match="slots"):
        pages.kit(broken)


# Ways a script could put text on the page around the kit's `el`/`setText`.
RAW_TEXT = re.compile(
    r"\.(textContent|innerText|outerText|innerHTML|outerHTML|nodeValue)\s*[+]?=(?!=)"
    r"|\.title\s*=(?!=)(?!\s*shown\()|createTextNode|insertAdjacent|document\.write"
)


@pytest.mark.parametrize("name", ["console.js", "runs.js", "approvals.js"])
def test_page_scripts_put_text_in_only_through_the_kit(name: str) -> None:
    source = pages.CONSOLE / name
    found = [
        f"{n}: {line.strip()}"
        for n, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1)
        if RAW_TEXT.search(line)
    ]
    assert found == []
