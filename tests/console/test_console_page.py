"""Assembling an operator page (`tether_common.pages`): every slot filled exactly once,
the shared kit inlined, no part able to end its element early, and a CSP that admits
exactly the page's own inline blocks."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest

from tether_brain.console.page import assemble as runs_console
from tether_common import pages

SHELL = "<style>/*a.css*/</style><script>//a.js</script>"


def test_the_runs_console_inlines_its_parts_and_the_kit() -> None:
    page = runs_console()
    (script,) = re.findall(r"<script>(.*?)</script>", page, flags=re.DOTALL)
    assert "async function readEvents(" in script  # the kit
    assert "class Timeline" in script  # the console's own
    assert "//page_kit.js" not in page
    assert "//console.js" not in page
    assert "/*console.css*/" not in page


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
