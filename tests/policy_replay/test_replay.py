"""Policy what-if through the real services (issue 21, items 2 and 3): a recorded "day"
of the agent `day` (calls the gates allowed, approvals allowed and denied, a gate's
denial, a call asked about because the run had read a file) is decided again under
proposals: its own policy changes nothing, a tighter one reports exactly the calls it
would have stopped, a looser one those it would have let through; the suggested grants
replay clean; who may ask, and what a bad body or window gets."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from replay_desk import ADMIN, Desk, bearer
from tether_client.cli import main
from tether_common.errors import NotFoundError
from tether_common.testing import call, say

# Starting the package's stack and recording the day take most of the first test's setup.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

BODY = "a note long enough that no grant should pin it: " + "x" * 40
CALLS = {
    "notes": call("file_write", path="notes.txt", content=BODY),  # granted: ran
    "time": call("current_time", timezone="UTC"),  # scope read: ran
    "report": call("file_write", path="report.md", content=BODY + "1"),  # asked: approved
    "secret": call("file_write", path="secret.txt", content=BODY + "2"),  # asked: denied
    # Not "09:00": between 09:00 and 09:59 UTC every word of it is in `time`'s result just
    # before (09, and 00 of "+00:00"), so finish-don't-loop read it as that result fed back.
    "convert": call("convert_time", time="9:30 pm", from_timezone="UTC", to_timezone="Asia/Tokyo"),
    "escape": call("file_write", path="../escape.txt", content="x"),  # the gates deny
    "read": call("file_read", path="notes.txt"),  # a workspace read: ran; taints the run
    "again": call("file_write", path="notes.txt", content=BODY + "3"),  # tainted: approved
}
# The approvals, in the order the run asks for them.
DECISIONS = {
    "report": "allow_once",
    "secret": "deny",
    "convert": "allow_once",
    "again": "allow_once",
}


@pytest.fixture(scope="module")
async def day(desk: Desk) -> dict[str, Any]:
    """The recorded day: one run through every call, its window, and call ids by name."""
    since = datetime.now(UTC) - timedelta(minutes=1)
    turns = [[c] for c in CALLS.values()] + [say("done")]
    run_id = await desk.start(turns, "day", max_steps=len(turns) + 1)
    for nth, (name, decision) in enumerate(DECISIONS.items(), start=1):
        card = await desk.asked(run_id, nth)
        assert card is not None
        assert card["call_id"] == CALLS[name]["id"], card
        assert (await desk.decide(card["approval_id"], decision, ADMIN_TOKEN)).status_code == 200
    status, _ = await desk.finish(run_id)
    assert status == "completed"
    ids = {c["id"]: name for name, c in CALLS.items()}
    return {"since": since.isoformat(), "until": _soon(), "run_id": run_id, "names": ids}


ADMIN_TOKEN = ADMIN["Authorization"].removeprefix("Bearer ")


def _soon() -> str:
    return (datetime.now(UTC) + timedelta(minutes=5)).isoformat()


async def post(
    desk: Desk, route: str, body: dict[str, Any], headers: dict[str, str] | None = ADMIN
) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as http:
        return await http.post(f"{desk.brain}/v1/policy/{route}", json=body, headers=headers)


async def replayed(desk: Desk, day: dict[str, Any], proposal: dict[str, Any], **more: Any) -> Any:
    body = {"agent": "day", "since": day["since"], "until": day["until"], "proposal": proposal}
    found = await post(desk, "replay", body | more)
    assert found.status_code == 200, found.text
    return found.json()


def by_name(day: dict[str, Any], report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {day["names"][c["call_id"]]: (c["before"], c["after"]) for c in report["changes"]}


async def test_its_own_policy_changes_nothing(desk: Desk, day: dict[str, Any]) -> None:
    """Taint, approvals and the run's state are rebuilt as the loop kept them."""
    report = await replayed(desk, day, {"grants": ["file_write?path=notes.txt", "web_fetch"]})
    assert (report["runs"], report["calls"], report["changed"]) == (1, len(CALLS), 0)
    assert report["skipped"] == {}
    every = await replayed(desk, day, {"grants": []}, only_changed=False)
    outcomes = {day["names"][c["call_id"]]: c["outcome"] for c in every["changes"]}
    assert outcomes == {
        "notes": "ran",
        "time": "ran",
        "report": "approved",
        "secret": "denied",
        "convert": "approved",
        "escape": "refused",
        "read": "ran",
        "again": "approved",
    }


async def test_a_tighter_policy_reports_what_it_would_have_stopped(
    desk: Desk, day: dict[str, Any]
) -> None:
    report = await replayed(desk, day, {"grants": []})
    assert report["transitions"] == {"allow->ask": 1}
    assert by_name(day, report) == {"notes": ("allow", "ask")}
    assert report["changes"][0]["code"] == "not_granted"
    locked = await replayed(desk, day, {"grants": [], "mode": "read-only"})
    assert locked["transitions"] == {"allow->deny": 1, "ask->deny": 3}
    assert locked["by_tool"] == {"file_write": {"allow->deny": 1, "ask->deny": 3}}
    assert set(by_name(day, locked)) == {"notes", "report", "secret", "again"}


async def test_a_looser_policy_reports_what_it_would_have_let_through(
    desk: Desk, day: dict[str, Any]
) -> None:
    report = await replayed(desk, day, {"grants": ["file_write"]}, guardrails={})
    assert report["transitions"] == {"ask->allow": 3}
    assert report["by_tool"] == {
        "convert_time": {"ask->allow": 1},
        "file_write": {"ask->allow": 2},
    }
    let_through = {day["names"][c["call_id"]]: c["outcome"] for c in report["changes"]}
    assert let_through == {"report": "approved", "secret": "denied", "convert": "approved"}
    cut = await replayed(desk, day, {"grants": ["file_write"]}, guardrails={}, limit=1)
    assert (len(cut["changes"]), cut["truncated"], cut["changed"]) == (1, True, 3)


async def test_the_suggestion_is_the_narrowest_and_replays_clean(
    desk: Desk, day: dict[str, Any]
) -> None:
    found = await post(desk, "suggest", {"agent": "day", "since": day["since"]})
    assert found.status_code == 200, found.text
    suggestion = found.json()
    assert suggestion["grants"] == ["file_write?path=in:notes.txt,report.md"]
    assert suggestion["added"] == suggestion["grants"]
    assert suggestion["removed"] == ["file_write?path=notes.txt", "web_fetch"]
    assert (suggestion["verified"], suggestion["problems"], suggestion["uncovered"]) == (
        True,
        [],
        [],
    )
    every = await replayed(desk, day, {"grants": suggestion["grants"]}, only_changed=False)
    for item in every["changes"]:
        name = day["names"][item["call_id"]]
        if item["outcome"] in ("ran", "approved"):
            assert item["after"] != "deny", name
            assert item["code"] not in ("not_granted", "grant_constraint_violated"), name
        else:
            assert item["after"] != "allow", name


async def test_who_may_ask(desk: Desk, day: dict[str, Any]) -> None:
    body = {"agent": "day", "since": day["since"], "proposal": {"grants": []}}
    assert (await post(desk, "replay", body, headers=None)).status_code == 401
    assert (
        await post(desk, "suggest", {"agent": "day", "since": day["since"]}, headers=None)
    ).status_code == 401
    _, viewer = await desk.person("viewer")
    refused = await post(desk, "replay", body, headers=bearer(viewer))
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
    _, elsewhere = await desk.person("operator", tenant="elsewhere")
    hidden = await post(desk, "replay", body, headers=bearer(elsewhere))
    assert (hidden.status_code, hidden.json()["error"]["code"]) == (404, "not_found")
    # Tenant `elsewhere`'s agent is not the admin's to run (a run is its caller's tenant's,
    # and an agent serves its own tenant only, unless shared); its own operator's run is
    # in the agent's history, for that operator and the admin alike.
    turns = [[call("current_time")], say("ok")]
    with pytest.raises(NotFoundError):
        await desk.start(turns, "other")
    status, _ = await desk.finish(await desk.start(turns, "other", token=elsewhere))
    assert status == "completed"
    theirs = await post(
        desk, "replay", body | {"agent": "other", "until": _soon()}, headers=bearer(elsewhere)
    )
    assert theirs.status_code == 200, theirs.text
    assert (theirs.json()["runs"], theirs.json()["calls"]) == (1, 1)
    mine = await post(desk, "replay", body | {"agent": "other", "until": _soon()})
    assert (mine.json()["runs"], mine.json()["calls"]) == (1, 1)
    missing = await post(desk, "suggest", {"agent": "nobody", "since": day["since"]})
    assert missing.status_code == 404


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"proposal": {"grants": ["bad.*?x=1"]}}, "grant"),
        ({"proposal": {"grants": [], "surprise": 1}}, "surprise"),
        ({"since": "2026-01-01T00:00:00"}, "timezone"),
        ({"until": "2000-01-01T00:00:00Z"}, "before until"),
        ({"since": "2000-01-01T00:00:00Z", "until": "2001-01-01T00:00:00Z"}, "93 days"),
        ({"since": "0001-01-01T00:00:00+14:00", "until": "0001-01-02T00:00:00Z"}, "UTC can hold"),
        ({"guardrails": {"": "deny"}}, "pattern"),
        ({"limit": 0}, "limit"),
        ({"agent": "a b"}, "agent"),
    ],
)
async def test_bad_bodies_are_structured_422s(
    desk: Desk, day: dict[str, Any], change: dict[str, Any], says: str
) -> None:
    body = {"agent": "day", "since": day["since"], "proposal": {"grants": []}} | change
    refused = await post(desk, "replay", body)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["code"] == "invalid_request"
    assert says in error["message"]


async def test_the_window_bounds_the_calls(desk: Desk, day: dict[str, Any]) -> None:
    before = datetime.fromisoformat(day["since"])
    empty = await replayed(
        desk,
        day | {"since": (before - timedelta(days=1)).isoformat(), "until": day["since"]},
        {"grants": []},
    )
    assert (empty["runs"], empty["calls"]) == (0, 0)


async def tether(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run the CLI (its own event loop, in a thread): its exit code and standard output."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    return code, capsys.readouterr().out


async def test_the_cli_replays_a_file_and_suggests(
    desk: Desk,
    day: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TETHER_API_URL", desk.brain)
    monkeypatch.setenv("TETHER_TOKEN", ADMIN_TOKEN)
    monkeypatch.setenv("COLUMNS", "240")  # table cells unfolded
    agent = tmp_path / "agent.yaml"
    agent.write_text("id: day\nversion: 3\ngrants: []\nmode: read-only\n")
    code, out = await tether(
        capsys, "policy", "replay", "-f", str(agent), "--since", "1h", "--json"
    )
    assert code == 0, out
    assert json.loads(out)["transitions"] == {"allow->deny": 1, "ask->deny": 3}
    code, out = await tether(capsys, "policy", "replay", "-f", str(agent), "--since", "1h")
    assert code == 0, out
    assert "allow->deny" in out
    assert "mode_read_only" in out
    code, out = await tether(capsys, "policy", "suggest", "--agent", "day", "--since", "1h")
    assert code == 0, out
    assert yaml.safe_load(out) == {"grants": ["file_write?path=in:notes.txt,report.md"]}
    assert "# - web_fetch" in out
    code, _ = await tether(capsys, "policy", "suggest", "--agent", "day", "--since", "soon")
    assert code != 0
