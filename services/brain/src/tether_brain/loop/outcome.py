"""What one step of a run came to: the loop's one outcome value, where a bool once meant
"ended" in one method and "parked" in another."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    GO_ON = "go_on"  # the run takes another step
    ENDED = "ended"  # its end is committed
    PARKED = "parked"  # it waits, holding nothing, for an operator or its helpers
    HANDED_BACK = "handed_back"  # this replica let go of it (shutting down)

    @property
    def stops(self) -> bool:
        """The loop stops stepping this run (it ended, parked or was handed back)."""
        return self is not Outcome.GO_ON
