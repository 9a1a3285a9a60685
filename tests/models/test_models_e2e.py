"""Issue 20 through the five real services: scripted model transcripts whose calls need
repairs (a place for a zone, a near tool name with a key synonym, a call with no name, a
12-hour time) reach the real tools-runner, run, and have every repair recorded on the
step; and model profiles through the brain's HTTP API: shown, set, listed with a broken
file reported, and probed against the scripted provider."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tether_client.client import TetherClient
from tether_client.server.supervisor import Supervisor
from tether_common.messages.runs import RunEvent

pytestmark = pytest.mark.e2e

ADMIN = {"Authorization": "Bearer test-operator-token"}


@pytest.fixture(scope="module")
def profiles_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("profiles")


@pytest.fixture(scope="module")
def stack_extra_env(profiles_dir: Path) -> dict[str, str]:
    return {"TETHER_GATEWAY_PROFILES_DIR": str(profiles_dir)}


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool_call", "id": "call_1", "name": name, "arguments": arguments}


def script(scripts_dir: Path, name: str, first: dict[str, Any]) -> None:
    turns = [[first, {"kind": "done"}], [{"kind": "chunk", "text": "Done."}, {"kind": "done"}]]
    (scripts_dir / f"{name}.json").write_text(json.dumps({"turns": turns}))


async def run_events(stack: Supervisor, model: str) -> list[RunEvent]:
    async with TetherClient(stack.child("brain").url, token="test-operator-token") as client:
        accepted = await client.start_run("Go.", provider="scripted", model=model)
        return [event async for event in client.events(accepted.run_id)]


def only(events: list[RunEvent], kind: str) -> dict[str, Any]:
    found = [e.data for e in events if e.kind == kind]
    assert len(found) == 1, (kind, [e.kind for e in events])
    return found[0]


REPAIRED = {
    "zone-by-place": (
        call("current_time", {"timezone": "London"}),
        ("current_time", {"timezone": "London"}),
        ["timezone 'London' read as 'Europe/London'"],
        "Europe/London",
    ),
    "near-name-and-synonym": (
        call("calculater", {"expr": "6*7"}),
        ("calculate", {"expression": "6*7"}),
        ["tool name 'calculater' read as 'calculate'", "argument 'expr' read as 'expression'"],
        "42",
    ),
    "no-name": (
        call("", {"expression": "2+3"}),
        ("calculate", {"expression": "2+3"}),
        ["no tool name: the arguments (expression) fit only 'calculate'"],
        "5",
    ),
    "twelve-hour-and-places": (
        call("convert_time", {"time": "9am", "from_timezone": "New York", "to_timezone": "Tokyo"}),
        ("convert_time", {"time": "9am", "from_timezone": "New York", "to_timezone": "Tokyo"}),
        [
            "timezone 'New York' read as 'America/New_York'",
            "timezone 'Tokyo' read as 'Asia/Tokyo'",
            "time '9am' read as '09:00'",
        ],
        "Asia/Tokyo",
    ),
}


@pytest.mark.parametrize("case", REPAIRED, ids=list(REPAIRED))
async def test_each_repair_runs_the_call_and_is_recorded_on_the_step(
    stack: Supervisor, scripts_dir: Path, case: str
) -> None:
    written, (name, arguments), repairs, shown = REPAIRED[case]
    script(scripts_dir, case, written)
    events = await run_events(stack, case)
    assert only(events, "run.end")["status"] == "completed"
    sent = only(events, "tool.call")
    assert (sent["name"], sent["arguments"]) == (name, arguments)
    result = only(events, "tool.result")
    assert result["ok"] is True, result["content"]
    assert shown in result["content"]
    assert result["repairs"] == repairs


async def test_a_call_written_right_records_no_repair(stack: Supervisor, scripts_dir: Path) -> None:
    script(scripts_dir, "as-written", call("current_time", {"timezone": "Europe/London"}))
    result = only(await run_events(stack, "as-written"), "tool.result")
    assert result["ok"] is True
    assert "repairs" not in result


@pytest.fixture
def brain(stack: Supervisor) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.child("brain").url, headers=ADMIN, timeout=60) as http:
        yield http


def test_profiles_are_shown_set_and_listed_through_the_brain(
    brain: httpx.Client, profiles_dir: Path
) -> None:
    default = brain.get("/v1/model-profiles/local")
    assert default.status_code == 200, default.text
    shown = default.json()
    assert (shown["source"], shown["tool_calling"], shown["prompt_tier"]) == (
        "default",
        "text",
        "compact",
    )
    changed = {**shown, "prompt_tier": "full", "grammar": False, "source": "set"}
    stored = brain.put("/v1/model-profiles", json=changed)
    assert stored.status_code == 200, stored.text
    again = brain.get("/v1/model-profiles/local").json()
    assert (again["source"], again["prompt_tier"], again["grammar"]) == ("set", "full", False)
    (profiles_dir / "broken.yaml").write_text("provider: local\nmodel: x\ntier: full\n")
    listed = brain.get("/v1/model-profiles").json()
    assert [(p["provider"], p["model"]) for p in listed["profiles"]] == [("local", shown["model"])]
    assert listed["problems"][0].startswith("broken.yaml: tier")
    unknown = brain.get("/v1/model-profiles/nosuch")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("notes", ["a\x00b", "\ud800"])
def test_a_profile_that_cannot_be_stored_is_a_422(brain: httpx.Client, notes: str) -> None:
    """Text no file or column can hold (a NUL, a lone surrogate) is refused at the edge,
    not a 500 from deeper down (schemathesis found the NUL)."""
    body = json.dumps({"provider": "local", "model": "m", "notes": notes}, ensure_ascii=True)
    refused = brain.put(
        "/v1/model-profiles", content=body, headers={"content-type": "application/json"}
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "invalid_request"


def test_setting_a_profile_needs_an_admin(brain: httpx.Client) -> None:
    anonymous = httpx.put(
        f"{brain.base_url}/v1/model-profiles",
        json={"provider": "local", "model": "m"},
        timeout=30,
    )
    assert anonymous.status_code == 401


def test_a_probe_through_the_brain_stores_what_it_found(
    brain: httpx.Client, scripts_dir: Path
) -> None:
    """The scripted model calls the clock for Tokyo whatever it is asked first, and reads
    a result back as its answer: the battery sees exactly that."""
    turns = [
        [call("current_time", {"timezone": "Asia/Tokyo"}), {"kind": "done"}],
        [{"kind": "chunk", "text": "It is 391."}, {"kind": "done"}],
    ]
    (scripts_dir / "probed.json").write_text(json.dumps({"turns": turns}))
    report = brain.post(
        "/v1/model-profiles/probe", json={"provider": "scripted", "model": "probed"}
    )
    assert report.status_code == 200, report.text
    found = report.json()
    assert found["stored"] is True
    assert found["profile"]["checks"] == {
        "tool_call": True,
        "no_tool": False,
        "tool_result": True,
        "argument_fidelity": False,
        "json_validity": True,
    }
    assert found["profile"]["prompt_tier"] == "compact"
    stored = brain.get("/v1/model-profiles/scripted", params={"model": "probed"}).json()
    assert stored["source"] == "probed"
