"""Staging a call before its approval: the runner runs it against a copy of the
workspace and answers its change set (`tether_common.messages.staging`), which the card
shows and the approval is bound to. Best effort: a runner that cannot stage it (its
staging folder unusable: `staging_unavailable`), cannot be asked, or an older one leaves
the call to be approved the old way, on a card that says why it shows no diff."""

from __future__ import annotations

import logging

from tether_brain.clients.runner import RunnerPort
from tether_common.errors import TetherError
from tether_common.messages.gateway import CallRecord
from tether_common.messages.staging import StagedEffect
from tether_common.messages.tools import ExecuteTool, ToolDescriptor, effect_key

log = logging.getLogger(__name__)
# A staged shell call runs the command (up to 120 s) on a copy of the workspace.
STAGE_TIMEOUT_S = 180.0


async def stage(
    runner: RunnerPort, run_id: str, call: CallRecord, tool: ToolDescriptor, workspace: str | None
) -> StagedEffect | None:
    """The runner's staging of `call` (its change set, or why it has none); None when
    the tool does not stage. A runner that answers an error (or none) gives an
    unstageable effect naming the error: never a change set, and never a reason to
    refuse the call (`error_code` stays unset)."""
    if not tool.stageable:
        return None
    request = ExecuteTool(
        run_id=run_id,
        call_id=call.id,
        name=tool.name,
        args=call.arguments,
        idempotency_key=effect_key(run_id, call.id),
        workspace=workspace,
    )
    try:
        return await runner.stage(request, timeout_s=STAGE_TIMEOUT_S)
    except TetherError as exc:
        log.warning("call %s not staged (approved the old way): %s", call.id, exc.message)
        reason = f"the runner could not stage it ({exc.code}: {exc.message})"
        return StagedEffect(call_id=call.id, stageable=False, reason=reason)


__all__ = ["STAGE_TIMEOUT_S", "stage"]
