"""This replica's hold on its runs as its own monotonic clock sees it: when each run's
lease was last set, and which runs must be fenced because that hold may have lapsed.

The database sets a lease to `now() + lease_s` by its own clock when the statement runs,
which is never before the moment we sent it. So a lease counted from the send time (taken
just before the request goes out) ends no later than the database's: fencing at
`sent + lease_s * (1 - margin)` stops a replica before any other may claim its runs,
whatever the network did to the answer. Nothing here reads a wall clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

Clock = Callable[[], float]


@dataclass(slots=True)
class Leases:
    """Run id → the send time of the last statement that set its lease (ours only)."""

    lease_s: float
    margin: float  # the share of lease_s kept in hand (0.2: fence at 80% of the lease)
    clock: Clock = time.monotonic
    _since: dict[str, float] = field(default_factory=dict)

    @property
    def hold_s(self) -> float:
        """How long after a lease was set this replica still acts on the run."""
        return self.lease_s * (1.0 - self.margin)

    def taken(self, run_id: str, sent_at: float) -> None:
        """A create or claim sent at `sent_at` gave us the run."""
        self._since[run_id] = max(sent_at, self._since.get(run_id, sent_at))

    def renewed(self, run_ids: Iterable[str], sent_at: float) -> None:
        """A renewal sent at `sent_at` extended these runs' leases (runs dropped since are
        not taken back by a late answer)."""
        for run_id in run_ids:
            if run_id in self._since:
                self._since[run_id] = max(sent_at, self._since[run_id])

    def forget(self, run_id: str) -> None:
        self._since.pop(run_id, None)

    def holds(self, run_id: str) -> bool:
        since = self._since.get(run_id)
        return since is not None and self.clock() < since + self.hold_s

    def lapsed(self) -> list[str]:
        """Runs whose hold may have run out: act on them no more."""
        limit = self.clock() - self.hold_s
        return [run_id for run_id, since in self._since.items() if since <= limit]

    def age(self, run_id: str) -> float | None:
        """Seconds since the run's lease was last set, as far as we know."""
        since = self._since.get(run_id)
        return None if since is None else self.clock() - since
