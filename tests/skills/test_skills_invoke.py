"""`/name` injection, the index, and the `load_skill` tool (tether_brain.skills.invoke)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

import tether_brain.skills
from tether_brain.context.prompting import SKILL_NOTE, history_shown, this_turns_skills
from tether_brain.skills import (
    LOAD_SKILL,
    MAX_INVOKED,
    ONLY_SKILL_PROMPT,
    FolderSkillStore,
    Skill,
    forget_loaded_skills,
    invoke,
    load_skill,
    load_skill_descriptor,
    load_skill_spec,
    skill_index,
)
from tether_brain.state.run import Limits, RunState
from tether_common.messages.gateway import CallRecord, ChatMessage
from tether_common.skills import INVOKE_CHAR_CAP


def skill(name: str, body: str = "") -> Skill:
    return Skill(name, f"About {name}. Use when {name}.", body or f"BODY OF {name}", Path(name))


SKILLS = {s.name: s for s in map(skill, ["coding-task", "usr", "a", "b", "c", "d"])}


@pytest.mark.parametrize(
    ("prompt", "cleaned", "names"),
    [
        ("/coding-task fix the login bug", "fix the login bug", ["coding-task"]),
        ("fix the login bug /coding-task", "fix the login bug", ["coding-task"]),
        ("fix /coding-task the bug", "fix the bug", ["coding-task"]),
        ("fix it\n/coding-task now", "fix it\nnow", ["coding-task"]),
        ("use /coding-task, please", "use , please", ["coding-task"]),
        ("/coding-task", ONLY_SKILL_PROMPT, ["coding-task"]),
        ("  /coding-task  /coding-task ", ONLY_SKILL_PROMPT, ["coding-task"]),
    ],
)
def test_stored_names_are_taken_out_and_injected(
    prompt: str, cleaned: str, names: list[str]
) -> None:
    invocation = invoke(prompt, SKILLS)
    assert invocation.prompt == cleaned
    assert [s.name for s in invocation.skills] == names
    message = invocation.message()
    assert message is not None
    assert message.role == "system"
    assert "BODY OF coding-task" in message.content
    assert invocation.events() == [{"name": "coding-task", "via": "slash", "truncated": False}]


@pytest.mark.parametrize(
    "prompt",
    [
        "ls /usr/bin please",  # a path, though `usr` is a stored name
        "/usr/bin/env python",
        "see a/coding-task here",  # not after a space
        "run /unknown-skill now",  # not stored
        "/Coding-Task",  # names are lower-case
        "/coding-task-extra",
        "http://host/coding-task",
    ],
)
def test_everything_else_is_untouched(prompt: str) -> None:
    invocation = invoke(prompt, SKILLS)
    assert invocation.prompt == prompt
    assert invocation.skills == ()
    assert invocation.message() is None


def test_at_most_three_skills() -> None:
    invocation = invoke("/a /b /c /d go", SKILLS)
    assert MAX_INVOKED == 3
    assert [s.name for s in invocation.skills] == ["a", "b", "c"]
    assert invocation.skipped == ("d",)
    assert invocation.prompt == "/d go"  # past the cap the token stays visible


def test_bodies_are_cut_at_the_cap() -> None:
    long = skill("long", "x" * (INVOKE_CHAR_CAP + 500))
    invocation = invoke("/long and /a", {"long": long, "a": SKILLS["a"]})
    message = invocation.message()
    assert message is not None
    assert message.content.count("x") == INVOKE_CHAR_CAP
    assert "load_skill" in message.content
    assert invocation.truncated() == ["long"]
    assert invocation.events()[0] == {"name": "long", "via": "slash", "truncated": True}
    assert "BODY OF a" in message.content


def test_index_has_one_line_per_skill_and_no_body() -> None:
    index = skill_index(SKILLS.values())
    lines = index.splitlines()
    assert len(lines) == 1 + len(SKILLS)
    assert lines[1] == "- a: About a. Use when a."
    assert "BODY" not in index
    assert skill_index([]) == ""
    wordy = Skill("w", "word " * 200, "b", Path("w"))
    assert len(wordy.index_line()) < 320


def test_load_skill_tool() -> None:
    spec = load_skill_spec(sorted(SKILLS))
    descriptor = load_skill_descriptor(sorted(SKILLS))
    assert spec.name == descriptor.name == LOAD_SKILL
    assert descriptor.idempotent
    assert descriptor.scope == "read"
    validator = Draft202012Validator(spec.parameters)
    assert validator.is_valid({"name": "a"})
    assert not validator.is_valid({"name": "nope"})
    assert not validator.is_valid({"name": "a", "x": 1})
    ok = load_skill(SKILLS, CallRecord(id="c1", name=LOAD_SKILL, arguments={"name": "a"}))
    assert ok.ok
    assert ok.call_id == "c1"
    assert "BODY OF a" in ok.content
    bad = load_skill(SKILLS, CallRecord(id="c2", name=LOAD_SKILL, arguments={"name": 3}))
    assert not bad.ok
    assert bad.error_code == "unknown_skill"
    assert bad.content.startswith("FAILED")


def test_loaded_bodies_last_one_turn() -> None:
    call = CallRecord(id="c1", name=LOAD_SKILL, arguments={"name": "a"})
    loaded = load_skill(SKILLS, call).content
    turn = [
        ChatMessage(role="user", content="first"),
        ChatMessage(role="assistant", tool_calls=[call]),
        ChatMessage(role="tool", content=loaded, tool_call_id="c1", name=LOAD_SKILL),
        ChatMessage(role="assistant", content="done"),
    ]
    assert forget_loaded_skills(turn) == turn  # still this turn
    later = forget_loaded_skills([*turn, ChatMessage(role="user", content="second")])
    assert "BODY OF a" not in later[2].content
    assert "skill a was loaded" in later[2].content
    assert turn[2].content == loaded  # the history itself is not changed


def test_store_feeds_invocation(tmp_path: Path, shipped: Path) -> None:
    skills = FolderSkillStore([tmp_path, shipped]).by_name()
    invocation = invoke("/incident-triage the API returns 502s", skills)
    message = invocation.message()
    assert message is not None
    assert "Stabilise before you diagnose" in message.content
    assert invocation.prompt == "the API returns 502s"


def test_exports() -> None:
    exported = tether_brain.skills.__all__
    assert all(hasattr(tether_brain.skills, name) for name in exported)
    assert sorted(exported) == sorted(set(exported))


def test_the_history_shown_is_the_same_without_walking_it() -> None:
    """`history_shown` (which looks only where the run says skill notes and loaded skills
    are) gives what walking the whole history gives, for random histories of notes,
    loads, results and user turns, added live or replayed from the journal."""
    changed = 0
    for seed in range(60):
        rng = random.Random(seed)
        now = datetime.now(UTC)
        state = RunState("run_s", "q", "scripted", None, Limits(50), now, now)
        for i in range(rng.randint(1, 30)):
            kind = rng.choice(["user", "note", "load", "result", "answer"])
            if kind == "user":
                state.add_message(ChatMessage(role="user", content=f"turn {i}"))
            elif kind == "note":
                state.add_message(ChatMessage(role="system", content="# Skill", name=SKILL_NOTE))
            elif kind == "answer":
                state.add_message(ChatMessage(role="assistant", content="ok"))
            else:
                name = LOAD_SKILL if kind == "load" else "calculate"
                call = CallRecord(id=f"c{i}", name=name, arguments={"name": "deploy"})
                state.add_message(ChatMessage(role="assistant", tool_calls=[call]))
                state.add_message(
                    ChatMessage(
                        role="tool", content="# Skill: deploy", tool_call_id=call.id, name=name
                    )
                )
        walked = forget_loaded_skills(this_turns_skills(state.messages))
        assert history_shown(state) == walked
        loaded = RunState("run_s", "q", "scripted", None, Limits(50), now, now)
        for entry in state.pending:
            loaded.replay(entry.kind, json.loads(entry.text))
        assert history_shown(loaded) == walked
        changed += walked != state.messages
    assert changed > 10  # the histories exercise both rules, not only the fast path
