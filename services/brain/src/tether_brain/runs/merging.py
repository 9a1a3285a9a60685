"""One reader's merge of a run's live text: each character of a step once, in order.

What a reader hears overlaps: the answer to its ask (the step's text so far, from offset
0) and the live deltas around it. A live delta heard before that answer can start past a
gap (text written before the reader listened); it waits, at most `GAP_WAIT_S`, for the
answer that fills the gap, then comes as it is (the step's durable event has every word).
Deltas that do not say their offset (an older brain) are taken as they come.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tether_common.messages.deltas import RunDelta

__all__ = ["GAP_WAIT_S", "TextMerge"]

# How long a delta past a gap waits for the answer to the reader's ask: the writer answers
# at once, so this is only reached when it has stopped writing (or does not answer).
GAP_WAIT_S = 5.0


@dataclass(slots=True)
class TextMerge:
    clock: Callable[[], float] = time.monotonic
    have: dict[int, int] = field(default_factory=dict)  # characters of each step given
    gapped: list[RunDelta] = field(default_factory=list)
    since: float | None = None  # when the oldest gapped delta came

    def take(self, delta: RunDelta) -> list[RunDelta]:
        """What to give the reader now that `delta` came (it belongs where the reader is:
        after its last durable event)."""
        if delta.offset is not None and delta.offset > self.have.get(delta.step, 0):
            self.since = self.clock() if self.since is None else self.since
            self.gapped.append(delta)
            return []
        given = [fresh] if (fresh := self._fresh(delta)) is not None else []
        return given + self._filled()

    def wait_s(self) -> float | None:
        """How long the reader may wait for what comes next before `expire` is due (None:
        no delta waits)."""
        return None if self.since is None else max(self.since + GAP_WAIT_S - self.clock(), 0.0)

    def expire(self) -> list[RunDelta]:
        """The gapped deltas as they are: the answer that would fill the gap did not come."""
        gapped, self.gapped, self.since = sorted(self.gapped, key=_place), [], None
        return [fresh for delta in gapped if (fresh := self._fresh(delta)) is not None]

    def passed(self, last: int) -> None:
        """The durable event `last` was given: a delta that waited for an earlier one is
        stale (the events carry its text)."""
        self.gapped = [d for d in self.gapped if d.seq_after >= last]
        self.since = self.since if self.gapped else None

    def _filled(self) -> list[RunDelta]:
        """The gapped deltas the text now reaches, in order."""
        given: list[RunDelta] = []
        for delta in sorted(self.gapped, key=_place):
            if (delta.offset or 0) <= self.have.get(delta.step, 0):
                self.gapped.remove(delta)
                if (fresh := self._fresh(delta)) is not None:
                    given.append(fresh)
        self.since = self.since if self.gapped else None
        return given

    def _fresh(self, delta: RunDelta) -> RunDelta | None:
        """What of `delta` the reader has not had yet, by its place in the step's text."""
        if delta.offset is None:
            return delta
        seen = self.have.get(delta.step, 0)
        end = delta.offset + len(delta.text)
        if end <= seen:
            return None
        self.have[delta.step] = end
        if delta.offset >= seen:
            return delta
        return delta.model_copy(update={"text": delta.text[seen - delta.offset :], "offset": seen})


def _place(delta: RunDelta) -> tuple[int, int]:
    return delta.step, delta.offset or 0
