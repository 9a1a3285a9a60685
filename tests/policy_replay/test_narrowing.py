"""The narrowest grants for one tool (`policy/narrowing.py`) and the diff against those in
force, as pure functions: exact values when few, free when many or long, never an entry
that allows a refused call, and every entry parsed back by the gates' own grammar."""

from __future__ import annotations

from typing import Any

import pytest

from tether_brain.gates.grants import parse_grant
from tether_brain.policy.narrowing import FEW, entry_text, narrowest
from tether_brain.policy.suggest import _diff
from tether_common.messages.policy_replay import Suggestion

LONG = "x" * 100


def allows(entries: list[str], args: dict[str, Any]) -> bool:
    return any(parse_grant(e).allows(args) for e in entries)


@pytest.mark.parametrize(
    "value", ["a,b", "in:x", "100%", "x#y&z=1?", "sp ace", "new\nline", "ü/é", "", "  padded  "]
)
def test_any_value_is_written_so_the_grammar_reads_it_back(value: str) -> None:
    for pins in ({"k": [value]}, {"k": [value, "other"]}):
        entry = entry_text("t", pins)
        assert parse_grant(entry).allows({"k": value}), entry
        assert not parse_grant(entry).allows({"k": value + "!"}), entry


def test_few_short_values_are_pinned_long_ones_left_free() -> None:
    wanted = [{"path": "a.txt", "content": LONG + "1"}, {"path": "b.txt", "content": LONG + "2"}]
    found = narrowest("file_write", wanted, [{"path": "c.txt", "content": "z"}])
    assert (found.entries, found.uncovered) == (["file_write?path=in:a.txt,b.txt"], [])


def test_many_values_are_left_free_unless_a_denial_needs_them() -> None:
    wanted = [{"path": f"f{i}.txt"} for i in range(FEW + 1)]
    assert narrowest("t", wanted, []).entries == ["t"]
    found = narrowest("t", wanted, [{"path": "secret.txt"}])
    assert len(found.entries) == 1
    assert all(allows(found.entries, w) for w in wanted)
    assert not allows(found.entries, {"path": "secret.txt"})


def test_a_product_that_holds_a_denial_is_split_into_exact_entries() -> None:
    wanted = [{"path": "a", "mode": "w"}, {"path": "b", "mode": "a"}]
    found = narrowest("t", wanted, [{"path": "a", "mode": "a"}])
    assert found.entries == ["t?mode=w&path=a", "t?mode=a&path=b"]


def test_what_cannot_be_told_from_a_denial_is_uncovered_not_granted() -> None:
    found = narrowest("t", [{"items": [1], "n": 1}], [{"items": [2], "n": 1}])
    assert (found.entries, found.uncovered) == ([], [0])


def suggestion(current: list[str], grants: list[str]) -> Suggestion:
    return Suggestion(
        agent="a",
        since="2026-01-01T00:00:00Z",
        until="2026-01-02T00:00:00Z",
        calls=0,
        wanted=0,
        refused=0,
        current=current,
        grants=grants,
    )


def test_the_diff_tells_narrowed_from_removed_and_added() -> None:
    found = suggestion(
        ["file_write", "file_read?path=a", "web_fetch", "calculate"],
        ["file_write?path=in:a,b", "file_read?path=in:a,b", "calculate"],
    )
    _diff(found, {"file_write": ["file_write?path=in:a,b"], "file_read": ["file_read?path=in:a,b"]})
    assert [(n.entry, n.to) for n in found.narrowed] == [("file_write", ["file_write?path=in:a,b"])]
    assert found.removed == ["file_read?path=a", "web_fetch"]  # wider, and unused
    assert found.added == ["file_read?path=in:a,b"]
    assert found.kept == ["calculate"]
