"""`tether tokens create --group` and the approvals commands' quorum progress, against the
real approvals service (which serves the shared `/v1/tokens` router too); `approvals
show` as a card, and approval ids by unique prefix, within the token's scope."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path

import pytest

from tether_approvals.testing import ApprovalsHarness, auth
from tether_client.cli import main
from tether_common.messages.approvals import ApprovalView
from tether_common.messages.staging import ChangeEntry, ChangeSet


async def tether(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI (its own event loop, in a thread): exit code, stdout, stderr."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_group_tokens_and_quorum_progress_in_the_cli(
    approvals: ApprovalsHarness,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("TETHER_API_URL", approvals.url)
    monkeypatch.setenv("TETHER_APPROVALS_URL", approvals.url)
    monkeypatch.setenv("TETHER_OPERATOR_TOKEN", approvals.admin_token)
    monkeypatch.setenv("TETHER_HOME", str(tmp_path))
    monkeypatch.delenv("TETHER_TOKEN", raising=False)
    name = f"sre-{uuid.uuid4().hex[:6]}"
    code, out, err = await tether(
        capsys, "tokens", "create", "--name", name, "--role", "approver",
        "--group", "sre", "--group", "leads,ops",
    )  # fmt: skip
    assert code == 0, err
    info, token = out.strip().splitlines()
    assert "groups=sre,leads,ops" in info

    created = await approvals.create(quorum={"needed": 2, "group": "sre"})
    code, out, err = await tether(capsys, "approvals", "list")
    assert code == 0, err
    [row] = [line for line in out.splitlines() if created.approval_id in line]
    assert "0/2 sre" in row

    monkeypatch.setenv("TETHER_OPERATOR_TOKEN", token)
    code, out, err = await tether(capsys, "approvals", "approve", created.approval_id)
    assert code == 0, err
    assert f"pending, 1/2 sre approved (by token:{name})" in out


def cli_as(monkeypatch: pytest.MonkeyPatch, approvals: ApprovalsHarness, home: Path) -> None:
    monkeypatch.setenv("TETHER_API_URL", approvals.url)
    monkeypatch.setenv("TETHER_APPROVALS_URL", approvals.url)
    monkeypatch.setenv("TETHER_OPERATOR_TOKEN", approvals.admin_token)
    monkeypatch.setenv("TETHER_HOME", str(home))
    monkeypatch.delenv("TETHER_TOKEN", raising=False)


def staged_set() -> ChangeSet:
    diff = "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1,2 @@\n+first line\n+second line\n"
    entry = ChangeEntry(
        path="notes.txt", change="created", type="text", base="absent", digest="d" * 64, diff=diff
    )
    return ChangeSet(digest="ab" * 32, tool="file_write", entries=[entry])


async def test_show_is_a_card_and_json_keeps_every_field(
    approvals: ApprovalsHarness,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Issue 29 (5): `approvals show` printed every raw field (version, action_digest,
    proof …), each row padded to the width of `changes` as one JSON line. Now a card:
    tool, arguments, why, the diff, expiry, who may decide; `-o json` keeps it all."""
    cli_as(monkeypatch, approvals, tmp_path)
    args = {"path": "notes.txt", "content": "first line\nsecond line\n"}
    created = await approvals.create(
        tool="file_write",
        args=args,
        reason="file writes need approval",
        changes=staged_set(),
        quorum={"needed": 2, "group": "sre"},
        requested_by="token:alice",
    )
    code, out, err = await tether(capsys, "approvals", "show", created.approval_id[4:14])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"── approval {created.approval_id}: pending"
    assert "   tool     file_write" in lines
    assert "   why      file writes need approval" in lines
    assert any(re.fullmatch(r"   expires  \S+ \S+ UTC \(in (\dm )?\d+s\)", x) for x in lines), out
    assert "   decides  2 different people of group sre, never the requester (token:alice); " \
        "any deny decides" in lines  # fmt: skip
    assert "            so far 0/2 sre: nobody yet" in lines
    assert '       "path": "notes.txt",' in lines
    at = lines.index("── approving applies exactly these changes (1; digest abababababab)")
    assert lines[at + 1 : at + 4] == [
        "   created notes.txt",
        "     --- /dev/null",
        "     +++ b/notes.txt",
    ]
    assert "     +second line" in lines
    for raw in ("action_digest", "proof", "version", '"entries"', created.action_digest):
        assert raw not in out, raw
    assert max(len(x) for x in lines) < 120, max(lines, key=len)

    code, out, err = await tether(capsys, "approvals", "show", created.approval_id, "-o", "json")
    assert code == 0, err
    whole = json.loads(out)
    assert set(whole) == set(ApprovalView.model_fields)
    assert whole["action_digest"] == created.action_digest
    assert ChangeSet.model_validate(whole["changes"]) == staged_set()


async def test_approval_ids_take_unique_prefixes(
    approvals: ApprovalsHarness,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Issue 29 (4): `tether approvals approve apr_976b916c` (a prefix, as run ids take)
    answered not_found with a hint naming `tether runs list`."""
    cli_as(monkeypatch, approvals, tmp_path)
    first, second = await approvals.create(), await approvals.create()
    code, out, err = await tether(capsys, "approvals", "approve", first.approval_id[:12])
    assert code == 0, err
    assert f"{first.approval_id}: granted (allow_once)" in out
    code, out, err = await tether(capsys, "approvals", "deny", second.approval_id[4:12])
    assert code == 0, err
    assert f"{second.approval_id}: denied (deny)" in out

    code, _, err = await tether(capsys, "approvals", "show", "apr_")
    assert code == 2
    assert "ambiguous_id" in err
    assert "matches" in err
    assert "type more of the id" in err

    unknown = uuid.uuid4().hex[:12]
    for ref in (unknown, f"apr_{unknown}", f"apr_{'0' * 32}"):
        code, _, err = await tether(capsys, "approvals", "approve", ref)
        assert code == 5, (ref, err)
        assert "hint: check the id (`tether approvals list`)" in err, err


async def test_a_prefix_never_names_a_request_outside_the_token_scope(
    approvals: ApprovalsHarness,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A prefix is resolved among the requests the token may read: another team's
    request is not found by it, nor named among the matches of an ambiguous one."""
    cli_as(monkeypatch, approvals, tmp_path)
    hidden = await approvals.create(agent="hidden-bot")
    mine = await approvals.create(agent="seen-bot")
    scoped = await approvals.token("approver", agents=["seen-bot"])
    monkeypatch.setenv("TETHER_OPERATOR_TOKEN", scoped)
    code, _, err = await tether(capsys, "approvals", "show", hidden.approval_id[:14])
    assert code == 5, err
    assert hidden.approval_id not in err
    code, out, err = await tether(capsys, "approvals", "show", mine.approval_id[:14])
    assert code == 0, err
    assert mine.approval_id in out
    code, out, err = await tether(capsys, "approvals", "show", "apr_")
    assert hidden.approval_id not in out + err


@pytest.mark.parametrize(
    "prefix",
    ["a_r_", "_pr_", "apr_%", "%", "____", "ap%", "apr\\_", "APR_", "apr__", "apr_ "],
)
async def test_the_id_prefix_filter_is_literal(approvals: ApprovalsHarness, prefix: str) -> None:
    """`id_prefix` is a prefix of characters, never a LIKE pattern: `_` and `%` match
    only themselves (or are refused as no id's characters), so no spelling widens it."""
    await approvals.create()
    found = await approvals.http.get(
        "/v1/approvals",
        params={"status": "all", "id_prefix": prefix},
        headers=auth(approvals.admin_token),
    )
    if found.status_code == 200:
        assert found.json()["approvals"] == []
    else:
        assert found.status_code == 422, found.text
