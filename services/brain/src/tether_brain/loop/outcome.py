"""What one step of a run came to, and what a collaborator of the step hands back for the
step to commit: `Outcome` is the loop's one outcome value (where a bool once meant
"ended" in one method and "parked" in another); `Settlement` is what the step is to make
of a collaborator's work (`dispatch.py` settles it: commits, ends, completes). No
collaborator commits, ends or completes a run itself."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tether_common.messages.runs import RunStatus


class Outcome(StrEnum):
    GO_ON = "go_on"  # the run takes another step
    ENDED = "ended"  # its end is committed
    PARKED = "parked"  # it waits, holding nothing, for an operator or its helpers
    HANDED_BACK = "handed_back"  # this replica let go of it (shutting down)

    @property
    def stops(self) -> bool:
        """The loop stops stepping this run (it ended, parked or was handed back)."""
        return self is not Outcome.GO_ON


@dataclass(frozen=True, slots=True)
class Ending:
    """The run ends `status` (committed with what the step added, published, the parent
    told), for `reason`, with `answer`."""

    status: RunStatus
    reason: str | None
    answer: str | None = None


@dataclass(frozen=True, slots=True)
class Answered:
    """An answer that stands, recorded: the run completes with it, unless user messages
    were queued meanwhile (they are delivered and the run goes on)."""

    answer: str


# `GO_ON` and `PARKED`: commit what the step added, then go on or park; `HANDED_BACK`:
# commit nothing (another replica redoes the step); `Ending`, `Answered`: end the run.
Settlement = Outcome | Ending | Answered
