"""Committed events and child-ended notices kept in memory instead of published: what a
client following the run would have read, in order, each event once (JetStream drops
a message id it has seen; so does this)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from tether_common.messages.runs import RunEvent
from tether_common.subjects import Subjects


class Kept:
    """Events kept in memory: confirmed as they are sent."""

    async def confirmed(self, timeout: float = 10.0) -> None:
        return None

    def abandon(self) -> None:
        return None


class MemoryEvents:
    """On the `state.events.EventsPort` protocol."""

    def __init__(self, subjects: Subjects | None = None) -> None:
        self._subjects = subjects or Subjects("inprocess")
        self._seen: set[str] = set()
        self.published: list[RunEvent] = []  # on each run's event subject
        self.notable: list[RunEvent] = []  # the second copies, on `Subjects.run_notable`
        self.notices: list[tuple[str, BaseModel]] = []

    @property
    def subjects(self) -> Subjects:
        return self._subjects

    async def js_send_many(self, items: Sequence[tuple[str, bytes, str]]) -> Kept:
        """Kept at once: their acks are already in."""
        for subject, body, msg_id in items:
            if msg_id not in self._seen:
                self._seen.add(msg_id)
                event = RunEvent.model_validate_json(body)
                notable = subject == self._subjects.run_notable(event.run_id)
                (self.notable if notable else self.published).append(event)
        return Kept()

    async def publish(self, subject: str, body: BaseModel) -> None:
        self.notices.append((subject, body))

    def of(self, run_id: str) -> list[RunEvent]:
        """The events published for `run_id`, in order."""
        return [e for e in self.published if e.run_id == run_id]
