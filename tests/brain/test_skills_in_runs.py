"""Skills inside real runs: `/name` injects a skill for its turn, `load_skill` loads one.
The shipped skills in `skills/` are the project folder the brain reads."""

from __future__ import annotations

import pytest

from tether_common.testing import RunScript, call, event_data, say

pytestmark = pytest.mark.e2e


async def test_slash_name_injects_the_skill_for_the_turn(run_script: RunScript) -> None:
    run, events = await run_script(
        [say("Following the triage principles.")], prompt="/incident-triage the API is down"
    )
    assert run.status == "completed"
    used = event_data(events, "skill.used")
    assert used == [{"name": "incident-triage", "via": "slash", "truncated": False, "step": 0}]


async def test_paths_are_not_skills(run_script: RunScript) -> None:
    _, events = await run_script([say("ok")], prompt="list /usr/bin please")
    assert not event_data(events, "skill.used")


async def test_load_skill_returns_the_body_as_a_tool_result(run_script: RunScript) -> None:
    run, events = await run_script([[call("load_skill", name="research-brief")], say("loaded")])
    assert run.status == "completed"
    result = event_data(events, "tool.result")[0]
    assert result["ok"] is True
    assert "research" in result["content"].lower()
    assert {"name": "research-brief", "via": "load_skill", "step": 1} in event_data(
        events, "skill.used"
    )


async def test_unknown_skill_is_a_failure_the_model_reads(run_script: RunScript) -> None:
    _, events = await run_script([[call("load_skill", name="no-such-skill")], say("ok")])
    result = event_data(events, "tool.result")[0]
    assert result["ok"] is False
