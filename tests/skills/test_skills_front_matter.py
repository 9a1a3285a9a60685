"""Skill front matter is YAML read by PyYAML's safe loader: comments, lists and mappings
mean what YAML says, and a hostile or malformed block is one `skill_invalid` error."""

from __future__ import annotations

import pytest

from tether_common.errors import ErrorCode, MessageError
from tether_common.skills import MAX_FRONT_MATTER_CHARS, parse_skill


def test_comments_lists_and_dates_read_as_yaml() -> None:
    text = (
        "---\nname: lists  # the name\ndescription: Lists things. Use when listing. # why\n"
        "allowed-tools:\n  - file_read\n  - file_search\nmetadata: {version: 2}\n"
        "updated: 2026-01-31\n---\nBody\n"
    )
    doc = parse_skill(text)
    assert (doc.name, doc.description) == ("lists", "Lists things. Use when listing.")
    assert doc.fields == {
        "allowed-tools": ["file_read", "file_search"],
        "metadata": {"version": 2},
        "updated": "2026-01-31",
    }


def test_an_empty_front_matter_has_no_fields() -> None:
    doc = parse_skill("---\n---\nBody\n")
    assert (doc.name, doc.description, doc.fields, doc.body) == ("", "", {}, "Body")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("---\n- a list\n---\n", "not 'key: value'"),
        ("---\njust text\n---\n", "not 'key: value'"),
        ("---\nname: [not, text]\n---\n", "must be text"),
        ("---\ndescription: 12\n---\n", "must be text"),
        ("---\na: &x [1]\nb: *x\n---\n", "line 3: anchors and aliases are not allowed"),
        # A "billion laughs" document: each alias doubles the one before.
        (
            "---\na: &a [x, x]\n"
            + "".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}]\n"
                for i in range(20)
            )
            + "---\n",
            "aliases are not allowed",
        ),
        ("---\na: " + "[" * 5000 + "\n---\n", "not valid YAML"),
        ("---\na: !!python/object:os.system x\n---\n", "not valid YAML"),
        ("---\ndescription: " + "x" * MAX_FRONT_MATTER_CHARS + "\n---\n", "characters"),
        ("---\n\tname: tab\n---\n", "not valid YAML"),
    ],
)
def test_bad_front_matter_is_one_structured_error(text: str, fragment: str) -> None:
    with pytest.raises(MessageError, match=fragment) as caught:
        parse_skill(text)
    assert caught.value.code == ErrorCode.SKILL_INVALID
