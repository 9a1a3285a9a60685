"""What of each run's history this brain last asked the gateway to keep, and the request
sent in a step's place: only the messages after that prefix, named by its digest
(`GenerateRequest.prefix_digest`), when the step's request begins with exactly it, else
the whole history. Either way the gateway is asked to keep the request's stable part
(`keep`, set where the request is built), so the next step sends only what is new.

Exact by construction: a prefix is named only when the request's first messages have
the same canonical JSON, character for character, as the kept ones, and the digest is
over that JSON. A gateway that does not hold it answers `prefix_unknown`, and the
caller sends the whole request (`ModelClient.generate`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from tether_common.messages.gateway import HISTORY_ROOT, GenerateRequest, history_digest

# Bounds on what is remembered (the texts are mostly the runs' own, shared while a run is
# in memory here; a finished run's stay until pushed out): runs, and characters in all.
MAX_RUNS = 4096
MAX_CHARS = 32 * 2**20


@dataclass(frozen=True, slots=True)
class Held:
    """The messages the gateway was asked to keep: their digest and canonical JSON."""

    digest: bytes
    texts: list[str]
    chars: int


@dataclass(frozen=True, slots=True)
class Outgoing:
    """What to send for a step (`sent`), and the whole request if that was a delta."""

    sent: GenerateRequest
    whole: GenerateRequest | None = None


class GatewayHistories:
    """Per run, the prefix the gateway was last asked to keep (least recently used runs
    forgotten first, within `MAX_RUNS` and `MAX_CHARS`)."""

    def __init__(self, max_runs: int = MAX_RUNS, max_chars: int = MAX_CHARS) -> None:
        self.max_runs = max_runs
        self.max_chars = max_chars
        self.chars = 0
        self._held: OrderedDict[str, Held] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def outgoing(self, request: GenerateRequest) -> Outgoing:
        """The step's request as a delta after the run's kept prefix when it begins with
        it; else whole. A request that keeps nothing (a side generation) goes as it is."""
        if request.keep is None or request.keep > len(request.messages):
            return Outgoing(request.model_copy(update={"keep": None}))
        texts = request.message_texts()
        held = self._forget(request.run_id)
        start = 0
        if held is not None and texts[: len(held.texts)] == held.texts:
            start = len(held.texts)
        elif held is not None:
            # Its start changed (a compact prompt's offer, a compaction): asking to keep
            # this one costs both sides a hash of the whole history, so only the next.
            return Outgoing(request.model_copy(update={"keep": None}))
        self._remember(request.run_id, request.keep, texts, held if start else None)
        if start == 0 or held is None:
            return Outgoing(request)
        delta = request.model_copy(
            update={"messages": request.messages[start:], "prefix_digest": held.digest.hex()}
        )
        return Outgoing(delta, whole=request)

    def forget(self, run_id: str) -> None:
        self._forget(run_id)

    def _remember(self, run_id: str, keep: int, texts: list[str], held: Held | None) -> None:
        kept = texts[:keep]
        if held is not None and keep >= len(held.texts):
            digest = history_digest(held.digest, kept[len(held.texts) :])
            chars = held.chars + sum(map(len, kept[len(held.texts) :]))
        else:
            digest, chars = history_digest(HISTORY_ROOT, kept), sum(map(len, kept))
        self._held[run_id] = Held(digest, kept, chars)
        self.chars += chars
        while self._held and (len(self._held) > self.max_runs or self.chars > self.max_chars):
            _, gone = self._held.popitem(last=False)
            self.chars -= gone.chars

    def _forget(self, run_id: str) -> Held | None:
        held = self._held.pop(run_id, None)
        if held is not None:
            self.chars -= held.chars
        return held
