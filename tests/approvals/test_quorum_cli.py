"""`tether tokens create --group` and the approvals commands' quorum progress, against the
real approvals service (which serves the shared `/v1/tokens` router too)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from tether_approvals.testing import ApprovalsHarness
from tether_client.cli import main


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
