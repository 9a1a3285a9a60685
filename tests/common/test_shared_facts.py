"""Facts two services share are declared once in tether_common, and the services agree
with them: the operator-facing cut, the approval expiry, the workspace, the context
window."""

from __future__ import annotations

import pytest

from tether_approvals.notices import cards
from tether_approvals.settings import ApprovalSettings
from tether_brain.settings import BrainSettings
from tether_brain.state import events
from tether_common import excerpt
from tether_common.messages.approvals import DEFAULT_EXPIRY_S
from tether_common.messages.profiles import DEFAULT_CONTEXT_WINDOW
from tether_common.settings import default_workspace
from tether_tools_runner.settings import RunnerSettings


def test_run_events_and_approval_cards_cut_alike() -> None:
    assert vars(events)["cut"] is excerpt.cut
    assert vars(cards)["cut"] is excerpt.cut
    long = "x" * (excerpt.CUT_CHARS + 5)
    assert excerpt.cut({"a": [long], "b": 1}) == {
        "a": ["x" * excerpt.CUT_CHARS + "… [5 more characters]"],
        "b": 1,
    }


def test_the_services_default_to_the_shared_values(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TETHER_RUNNER_WORKSPACE", "TETHER_BRAIN_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("TETHER_APPROVALS_DEFAULT_EXPIRY_S", "TETHER_BRAIN_APPROVAL_EXPIRY_S"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TETHER_BRAIN_DEFAULT_CONTEXT_WINDOW", raising=False)
    assert RunnerSettings().workspace == BrainSettings().workspace == default_workspace()
    assert ApprovalSettings().default_expiry_s == DEFAULT_EXPIRY_S
    assert BrainSettings().approval_expiry_s == DEFAULT_EXPIRY_S
    assert BrainSettings().default_context_window == DEFAULT_CONTEXT_WINDOW
