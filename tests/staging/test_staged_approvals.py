"""Staged effects through the five real services: a call that asks is staged by the
runner first, the approval card (approvals API) carries its change set, approving
applies exactly that set, a change underneath makes it stale and a new card appears,
a command that may leave the workspace is approved the old way, and the audit trail
holds the change set's digest and verifies."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from selenium.webdriver.common.by import By

from chromium_browser import chromium, sign_in, texts_of, wait_for
from tether_brain.persistence import trail
from tether_client import TetherClient
from tether_client.cli import main
from tether_client.ops_cli import offer_approval
from tether_client.server.supervisor import Supervisor
from tether_common.db import make_engine
from tether_common.testing import Turn, call, say, write_script
from tether_tools_runner.sandbox import hand_over, sandbox_user

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOKEN = "test-operator-token"  # tests/conftest.py OPERATOR_TOKEN: an admin token
STAGED = ("file_write", "file_edit", "shell")
AGENT = "stager"  # may read files; the organisation asks before the three staged tools


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("staged")
    base.chmod(0o755)  # the sandbox user passes through to the workspace
    return base / "workspace"


@pytest.fixture(scope="module")
def stack_extra_env(shared: Path) -> dict[str, str]:
    return {
        "TETHER_BRAIN_GUARDRAILS": json.dumps(dict.fromkeys(STAGED, "confirm")),
        "TETHER_RUNNER_WORKSPACE": str(shared),
        "TETHER_BRAIN_WORKSPACE": str(shared),
        "TETHER_BRAIN_AGENTS": json.dumps({AGENT: {"grants": ["file_read"]}}),
        "TETHER_RUNNER_STAGING_DIR": str(shared.parent / "staging"),
    }


def own(workspace: Path) -> None:
    hand_over(workspace, sandbox_user())


async def cards(stack: Supervisor, run_id: str, count: int) -> list[dict[str, Any]]:
    """The run's first `count` approval cards, as the approvals API shows them."""
    ids: list[str] = []
    async with TetherClient(stack.child("brain").url) as client:
        async for event in client.events(run_id):
            if event.kind == "tool.approval_needed":
                ids.append(event.data["approval_id"])
                if len(ids) == count:
                    break
            assert event.kind != "run.end", event.data
    async with httpx.AsyncClient(timeout=30) as http:
        shown = [
            await http.get(
                f"{stack.child('approvals').url}/v1/approvals/{approval_id}",
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            for approval_id in ids
        ]
    return [r.raise_for_status().json() for r in shown]


async def start(stack: Supervisor, scripts: Path, turns: list[Turn]) -> str:
    model = write_script(scripts, turns)
    async with TetherClient(stack.child("brain").url) as client:
        accepted = await client.start_run(
            "change the files",
            provider="scripted",
            model=model,
            allow_shell=True,
            agent=AGENT,
        )
    return accepted.run_id


async def decide(stack: Supervisor, approval_id: str, decision: str = "allow_once") -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        answer = await client.post(
            f"{stack.child('approvals').url}/v1/approvals/{approval_id}/decision",
            json={"decision": decision},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    answer.raise_for_status()


async def finish(stack: Supervisor, run_id: str) -> tuple[str, list[dict[str, Any]]]:
    async with TetherClient(stack.child("brain").url) as client:
        events = [e async for e in client.events(run_id)]
        status = (await client.get_run(run_id)).status
    return status, [{"kind": e.kind, **e.data} for e in events]


async def audit(database_url: str, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        rows = await conn.fetch(
            "SELECT event, data::text AS data FROM audit_records WHERE run_id = $1 ORDER BY seq",
            run_id,
        )
    finally:
        await conn.close()
    engine = make_engine(database_url, pool_size=1)
    try:
        assert await trail.verify_run(engine, run_id) == []
    finally:
        await engine.dispose()
    return [(r["event"], json.loads(r["data"])) for r in rows]


async def test_a_staged_edit_shows_its_diff_and_approving_applies_exactly_it(
    stack: Supervisor, scripts_dir: Path, shared: Path, database_url: str
) -> None:
    (shared / "settings.ini").write_text("[app]\nmode = debug\nport = 80\n")
    own(shared)
    edit = {"path": "settings.ini", "old_text": "mode = debug", "new_text": "mode = <b>prod</b>"}
    run_id = await start(
        stack,
        scripts_dir,
        [[call("file_read", path="settings.ini")], [call("file_edit", **edit)], say("done")],
    )
    [card] = await cards(stack, run_id, 1)
    changes = card["changes"]
    assert changes is not None, (card["tool"], card["reason"])
    [entry] = changes["entries"]
    assert (entry["path"], entry["change"], entry["type"]) == ("settings.ini", "modified", "text")
    assert "-mode = debug\n+mode = <b>prod</b>\n" in entry["diff"]
    assert (shared / "settings.ini").read_text() == "[app]\nmode = debug\nport = 80\n"

    await decide(stack, card["approval_id"])
    status, events = await finish(stack, run_id)
    assert status == "completed"
    assert (shared / "settings.ini").read_text() == "[app]\nmode = <b>prod</b>\nport = 80\n"
    [result] = [e for e in events if e["kind"] == "tool.result" and e["name"] == "file_edit"]
    assert result["ok"], result
    records = await audit(database_url, run_id)
    requested = [d for e, d in records if e == "approval.requested"]
    decided = [d for e, d in records if e == "approval.decided"]
    applied = [d for e, d in records if e == "tool.result" and d.get("applied")]
    assert requested[0]["changes"] == changes["digest"]
    assert decided[0]["changes"] == changes["digest"]
    assert decided[0]["outcome"] == "consumed"
    assert applied[0]["applied"] == changes["digest"]


async def test_a_change_underneath_makes_the_approval_stale_and_a_new_card_appears(
    stack: Supervisor, scripts_dir: Path, shared: Path, database_url: str
) -> None:
    (shared / "notes.txt").write_text("one\n")
    own(shared)
    run_id = await start(
        stack, scripts_dir, [[call("file_write", path="notes.txt", content="two\n")], say("ok")]
    )
    [first] = await cards(stack, run_id, 1)
    assert "-one\n+two\n" in first["changes"]["entries"][0]["diff"]
    (shared / "notes.txt").write_text("someone else\n")
    own(shared)

    await decide(stack, first["approval_id"])
    _, second = await cards(stack, run_id, 2)
    assert (shared / "notes.txt").read_text() == "someone else\n"  # nothing applied
    assert second["approval_id"] != first["approval_id"]
    assert second["changes"]["digest"] != first["changes"]["digest"]
    assert "-someone else\n+two\n" in second["changes"]["entries"][0]["diff"]

    await decide(stack, second["approval_id"])
    status, _ = await finish(stack, run_id)
    assert status == "completed"
    assert (shared / "notes.txt").read_text() == "two\n"
    records = await audit(database_url, run_id)
    outcomes = [d["outcome"] for e, d in records if e == "approval.decided"]
    assert outcomes == ["stale_effect", "consumed"]


async def test_an_edit_gone_stale_is_told_to_the_model_not_asked_again(
    stack: Supervisor, scripts_dir: Path, shared: Path
) -> None:
    """A staged edit whose file changed before the approval applies nothing; staged again,
    the edit itself would now fail (its file changed since it was read), so the model is
    told so at once and no second card asks for a call that cannot succeed."""
    (shared / "todo.txt").write_text("- milk\n")
    own(shared)
    edit = {"path": "todo.txt", "old_text": "- milk", "new_text": "- oat milk"}
    run_id = await start(
        stack,
        scripts_dir,
        [[call("file_read", path="todo.txt")], [call("file_edit", **edit)], say("noted")],
    )
    [card] = await cards(stack, run_id, 1)
    (shared / "todo.txt").write_text("- milk\n- eggs\n")
    own(shared)
    await decide(stack, card["approval_id"])
    status, events = await finish(stack, run_id)
    assert status == "completed"
    assert (shared / "todo.txt").read_text() == "- milk\n- eggs\n"  # nothing applied
    assert [e["kind"] for e in events].count("tool.approval_needed") == 1
    [result] = [e for e in events if e["kind"] == "tool.result" and e["name"] == "file_edit"]
    assert (result["ok"], result["error_code"]) == (False, "stale_revision"), result


async def test_a_staged_command_shows_created_modified_deleted_and_applies_them(
    stack: Supervisor, scripts_dir: Path, shared: Path
) -> None:
    (shared / "cmd").mkdir()
    (shared / "cmd" / "app.py").write_text("DEBUG = 1\n")
    (shared / "cmd" / "old.log").write_text("noise\n")
    own(shared)
    command = "cd cmd && sed -i 's/1/0/' app.py && echo made > new.txt && rm old.log"
    run_id = await start(stack, scripts_dir, [[call("shell", command=command)], say("ok")])
    [card] = await cards(stack, run_id, 1)
    got = {e["path"]: e["change"] for e in card["changes"]["entries"]}
    assert got == {"cmd/app.py": "modified", "cmd/new.txt": "created", "cmd/old.log": "deleted"}
    assert (shared / "cmd" / "old.log").exists()
    await decide(stack, card["approval_id"])
    status, _ = await finish(stack, run_id)
    assert status == "completed"
    assert (shared / "cmd" / "app.py").read_text() == "DEBUG = 0\n"
    assert (shared / "cmd" / "new.txt").read_text() == "made\n"
    assert not (shared / "cmd" / "old.log").exists()


async def test_a_network_command_is_not_staged_and_is_approved_the_old_way(
    stack: Supervisor, scripts_dir: Path
) -> None:
    command = "curl -s -m 2 http://127.0.0.1:9/ ; echo ran-it"
    run_id = await start(stack, scripts_dir, [[call("shell", command=command)], say("ok")])
    [card] = await cards(stack, run_id, 1)
    assert card["changes"] is None
    assert "(not staged: its effect may leave the workspace (network))" in card["reason"]
    await decide(stack, card["approval_id"])
    status, events = await finish(stack, run_id)
    assert status == "completed"
    [result] = [e for e in events if e["kind"] == "tool.result" and e["name"] == "shell"]
    assert "applied the approved change set" not in json.dumps(result)


async def test_a_runner_that_cannot_stage_asks_without_a_diff_and_says_why(
    stack: Supervisor, scripts_dir: Path, shared: Path
) -> None:
    """The runner's staging folder is a file (as `/tether-staging` was to a non-root
    runner): the stage request answers `staging_unavailable`, the card holds no change
    set and says why, and approving runs the command the old way."""
    own(shared)
    folder = shared.parent / "staging"
    shutil.rmtree(folder, ignore_errors=True)
    folder.write_text("not a folder")
    try:
        command = "echo unstaged > unstaged.txt"
        run_id = await start(stack, scripts_dir, [[call("shell", command=command)], say("ok")])
        [card] = await cards(stack, run_id, 1)
    finally:
        folder.unlink()
    assert card["changes"] is None
    assert "(not staged: the runner could not stage it (staging_unavailable: " in card["reason"]
    await decide(stack, card["approval_id"])
    status, events = await finish(stack, run_id)
    assert status == "completed"
    [result] = [e for e in events if e["kind"] == "tool.result" and e["name"] == "shell"]
    assert "applied the approved change set" not in json.dumps(result)
    assert (shared / "unstaged.txt").read_text() == "unstaged\n"


class Terminal(io.StringIO):
    """Standard input that says it is a terminal."""

    def isatty(self) -> bool:
        return True


async def test_the_cli_shows_the_change_set_escaped(
    stack: Supervisor,
    scripts_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_APPROVALS_URL", stack.child("approvals").url)
    monkeypatch.setenv("TETHER_OPERATOR_TOKEN", TOKEN)
    hostile = "title\x1b[2J\x1b[31mred\n"  # would clear and recolour a terminal
    run_id = await start(
        stack, scripts_dir, [[call("file_write", path="cli.txt", content=hostile)], say("ok")]
    )
    [card] = await cards(stack, run_id, 1)
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["approvals", "show", card["approval_id"]])
    out = capsys.readouterr().out
    assert code == 0
    assert "approving applies exactly these changes (1;" in out
    assert "created cli.txt" in out
    assert "+title⟨U+001B⟩[2J⟨U+001B⟩[31mred" in out
    assert "\x1b" not in out

    monkeypatch.setattr(sys, "stdin", Terminal())
    sent = await offer_approval(
        {"approval_id": card["approval_id"], "name": "file_write"}, read=lambda _prompt: "d"
    )
    assert sent == "deny"
    out = capsys.readouterr().out
    assert "+title⟨U+001B⟩[2J⟨U+001B⟩[31mred" in out
    assert "\x1b" not in out
    status, _ = await finish(stack, run_id)
    assert status == "completed"
    assert not (stack_workspace(stack) / "cli.txt").exists()


def stack_workspace(stack: Supervisor) -> Path:
    return Path(stack.env["TETHER_RUNNER_WORKSPACE"])


async def test_the_runs_console_shows_the_change_set_on_the_card(
    stack: Supervisor, scripts_dir: Path, tmp_path: Path
) -> None:
    content = "hello <script>window.__pwned=1</script>\n"
    run_id = await start(
        stack, scripts_dir, [[call("file_write", path="page.html", content=content)], say("ok")]
    )
    [card] = await cards(stack, run_id, 1)
    url = stack.child("brain").url

    def look() -> tuple[str, list[str], bool]:
        with chromium(tmp_path / "chromium") as driver:
            sign_in(driver, url + "/console", TOKEN)
            driver.get(f"{url}/console#/runs/{run_id}")
            # The run's own card (the Approvals view holds the same card, not shown here).
            shown = f'#approvals .card[data-id="{card["approval_id"]}"] .changes'
            wait_for(driver, shown)
            box = driver.find_element(By.CSS_SELECTOR, shown)
            added = [s.text for s in box.find_elements(By.CSS_SELECTOR, ".diff .add")]
            return box.text, added, driver.execute_script("return window.__pwned === undefined")

    text, added, safe = await asyncio.to_thread(look)
    assert "created page.html" in text
    assert "+hello <script>window.__pwned=1</script>" in added
    assert safe
    await decide(stack, card["approval_id"], "deny")
    status, _ = await finish(stack, run_id)
    assert status == "completed"


TETHER = Path(sys.executable).parent / "tether"
BIDI_NAME = "invoice\u202egpj.sh"  # reads "invoicehs.jpg" when the RLO is not shown
BIDI_SHOWN = "invoice⟨U+202E⟩gpj.sh"


def tether(stack: Supervisor, home: Path, *argv: str) -> str:
    """The `tether` binary against the stack: its standard output (it must succeed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")} | {
        "TETHER_HOME": str(home),
        "TETHER_API_URL": stack.child("brain").url,
        "TETHER_APPROVALS_URL": stack.child("approvals").url,
        "TETHER_TOKEN": TOKEN,
        "TETHER_OPERATOR_TOKEN": TOKEN,
    }
    done = subprocess.run(
        [str(TETHER), *argv], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_name_with_a_bidi_control_reads_as_what_it_is(
    stack: Supervisor, scripts_dir: Path, tmp_path: Path
) -> None:
    """Issue 28 (8): a staged `invoice\\u202egpj.sh` read `created invoicehs.jpg` on the
    runs console and the CLI printed the RLO raw. Both consoles, `tether approvals show`
    (table and JSON) and `tether runs follow` show the code point escaped."""
    run_id = await start(
        stack,
        scripts_dir,
        [[call("file_write", path=BIDI_NAME, content="#!/bin/sh\necho hi\n")], say("ok")],
    )
    [card] = await cards(stack, run_id, 1)
    entry = f'.card[data-id="{card["approval_id"]}"] .changes .entry'

    def look(url: str) -> str:
        with chromium(tmp_path / "chromium") as driver:
            sign_in(driver, url, TOKEN)
            where = "#board"  # the approvals service's page: its Approvals view alone
            if url.endswith("/console"):
                driver.get(f"{url}#/runs/{run_id}")
                where = "#approvals"  # the run's own card on the unified console
            wait_for(driver, f"{where} {entry}")
            (text,) = texts_of(driver, f"{where} {entry}")
            return text

    assert await asyncio.to_thread(look, stack.child("brain").url + "/console") == (
        f"created {BIDI_SHOWN}"
    )
    assert await asyncio.to_thread(look, stack.child("approvals").url) == f"created {BIDI_SHOWN}"

    shown = await asyncio.to_thread(
        tether, stack, tmp_path, "approvals", "show", card["approval_id"]
    )
    assert f"created {BIDI_SHOWN}" in shown
    assert "\u202e" not in shown
    as_json = await asyncio.to_thread(
        tether, stack, tmp_path, "approvals", "show", card["approval_id"], "-o", "json"
    )
    assert "\u202e" not in as_json
    assert json.loads(as_json)["changes"]["entries"][0]["path"] == BIDI_NAME  # the data, exact

    await decide(stack, card["approval_id"], "deny")
    status, _ = await finish(stack, run_id)
    assert status == "completed"
    followed = await asyncio.to_thread(tether, stack, tmp_path, "runs", "follow", run_id)
    assert f'→ file_write {{"path": "{BIDI_SHOWN}"' in followed
    assert "\u202e" not in followed
    assert not (stack_workspace(stack) / BIDI_NAME).exists()


async def answer(stack: Supervisor, approval_id: str, body: dict[str, Any]) -> httpx.Response:
    """An operator's `edit` or `respond` through the approvals API."""
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(
            f"{stack.child('approvals').url}/v1/approvals/{approval_id}/decision",
            json=body,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )


async def ledger(database_url: str, run_id: str) -> int:
    """How many effects the runner recorded for the run (what it ran)."""
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        return int(
            await conn.fetchval("SELECT count(*) FROM tool_effects WHERE run_id = $1", run_id)
        )
    finally:
        await conn.close()


async def test_an_edit_is_staged_again_and_applied_and_audited_with_the_original(
    stack: Supervisor, scripts_dir: Path, shared: Path, database_url: str
) -> None:
    run_id = await start(
        stack,
        scripts_dir,
        [
            [call("file_write", path="edited.txt", content="the model's draft\n")],
            # The model is told its call ran with the operator's arguments.
            [{"present": "OPERATOR_EDIT"}, *say("written")],
        ],
    )
    [card] = await cards(stack, run_id, 1)
    assert "+the model's draft\n" in card["changes"]["entries"][0]["diff"]
    refused = await answer(
        stack, card["approval_id"], {"decision": "edit", "arguments": {"path": "edited.txt"}}
    )
    assert refused.status_code == 422, refused.text  # `content` is required by the schema
    assert refused.json()["error"]["code"] == "arguments_invalid"

    edited = {"path": "edited.txt", "content": "the operator's text\n"}
    decided = await answer(stack, card["approval_id"], {"decision": "edit", "arguments": edited})
    assert decided.status_code == 200, decided.text
    assert decided.json()["edited_args"] == edited
    assert decided.json()["args"]["content"] == "the model's draft\n"  # the original kept
    status, events = await finish(stack, run_id)
    assert status == "completed", events[-1]
    assert (shared / "edited.txt").read_text() == "the operator's text\n"
    [result] = [e for e in events if e["kind"] == "tool.result" and e["name"] == "file_write"]
    assert result["ok"], result
    assert result["content"].startswith("OPERATOR_EDIT:")
    records = await audit(database_url, run_id)
    [edit] = [d for e, d in records if e == "approval.edited"]
    assert edit["before"]["content"] != edit["after"]["content"]
    [decision] = [d for e, d in records if e == "approval.decided"]
    assert (decision["decision"], decision["outcome"]) == ("edit", "consumed")
    # Staged again: what was applied is the edited call's change set, not the card's.
    [applied] = [d["applied"] for e, d in records if e == "tool.result" and d.get("applied")]
    assert applied != card["changes"]["digest"]
    # Both gate decisions are in the trail: the model's call's and the edited call's.
    assert len([d for e, d in records if e == "gate.decision"]) >= 2


async def test_an_edit_into_a_refused_call_is_refused_by_the_gate(
    stack: Supervisor, scripts_dir: Path, shared: Path, database_url: str
) -> None:
    """The edited call goes through every gate again: an edit into a protected path is
    denied there, whatever the operator approved; nothing is written."""
    run_id = await start(
        stack,
        scripts_dir,
        [[call("file_write", path="fine.txt", content="x\n")], say("done")],
    )
    [card] = await cards(stack, run_id, 1)
    into = {"path": ".env", "content": "SECRET=1\n"}
    decided = await answer(stack, card["approval_id"], {"decision": "edit", "arguments": into})
    assert decided.status_code == 200, decided.text
    status, events = await finish(stack, run_id)
    assert status == "completed"
    [result] = [e for e in events if e["kind"] == "tool.result" and e["name"] == "file_write"]
    assert not result["ok"]
    assert not (shared / ".env").exists()
    assert not (shared / "fine.txt").exists()
    assert await ledger(database_url, run_id) == 0
    records = await audit(database_url, run_id)
    [decision] = [d for e, d in records if e == "approval.decided"]
    assert decision["outcome"] == result["error_code"]
    assert decision["outcome"] not in ("consumed", None)


async def test_a_response_is_the_models_result_marked_as_the_operators_and_runs_nothing(
    stack: Supervisor, scripts_dir: Path, shared: Path, database_url: str
) -> None:
    run_id = await start(
        stack,
        scripts_dir,
        [
            [call("file_write", path="answered.txt", content="x\n")],
            [
                {"present": "OPERATOR_RESPONSE: file_write did not run"},
                {"present": "write to notes/answered.txt instead"},
                *say("understood"),
            ],
        ],
    )
    [card] = await cards(stack, run_id, 1)
    text = "write to notes/answered.txt instead"
    decided = await answer(stack, card["approval_id"], {"decision": "respond", "text": text})
    assert decided.status_code == 200, decided.text
    assert (decided.json()["status"], decided.json()["decision"]) == ("denied", "respond")
    status, events = await finish(stack, run_id)
    assert status == "completed", events[-1]
    [result] = [e for e in events if e["kind"] == "tool.result" and e["name"] == "file_write"]
    assert (result["ok"], result["error_code"]) == (False, "operator_response")
    assert not (shared / "answered.txt").exists()
    assert await ledger(database_url, run_id) == 0
    records = await audit(database_url, run_id)
    assert not [d for e, d in records if e == "tool.call"]
    # Respond is one person's answer: a bare `respond` without text is refused.
    bad = await answer(stack, card["approval_id"], {"decision": "respond"})
    assert bad.status_code == 422
