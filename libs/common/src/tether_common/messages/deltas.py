"""Live text: a run's model text as it is written, ahead of the step's durable events.

A `RunDelta` is ephemeral: published on core NATS (`Subjects.run_deltas(run_id)`), never
on JetStream and never journaled, so a reader that was not listening misses it and
nothing replays it. The step's durable `step` event still carries the whole text.
`seq_after` is the `seq` of the run's last durable event when the text was written: a
delta belongs after that event and before the next one, which is how a reader that
merges deltas with the durable stream orders them (and drops one that arrives late).
`offset` places a delta's text in its step's text, so a reader that joins mid-turn can
ask the writing replica for the step's text so far (`DeltaAsk` on
`Subjects.run_deltas_ask`: it answers with one delta from offset 0 on the run's delta
subject) and drop what it already has of every later one.
"""

from __future__ import annotations

from tether_common.messages.base import WireModel

__all__ = ["DeltaAsk", "RunDelta"]


class RunDelta(WireModel):
    """Text the model wrote since the previous delta of the same step (coalesced)."""

    run_id: str
    step: int
    seq_after: int  # the run's last durable event when this text was written
    text: str
    tenant: str | None = None  # the run's tenant, as on `RunEvent`
    depth: int | None = None  # set on a sub-agent's deltas (1 child, 2 grandchild)
    # Characters of the step's text before this delta (None: not said, e.g. an older
    # brain); the catch-up answer to a `DeltaAsk` starts at 0 and overlaps live deltas.
    offset: int | None = None


class DeltaAsk(WireModel):
    """A reader has just started listening to `run_id`'s deltas: the replica writing its
    text (if any) publishes the current step's text so far as one delta, offset 0."""

    run_id: str
