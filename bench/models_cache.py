"""What each model request of `python -m bench models` cost the llama.cpp server in prompt
tokens, read from the server's own log (its `verbose` lines; nothing is asked of it):
how many tokens of the prompt its KV cache already held (reused) and how many it had to
evaluate (prefill, which dominates a small model's step on a CPU).

Per request the server logs `Llama.generate: N prefix-match hit, remaining M prompt
tokens to eval` when it keeps the first N tokens of the previous prompt (nothing when it
keeps none), then `llama_perf_context_print: prompt eval time = … / M tokens` as the
completion ends, and `eval time = … / G runs` for the G tokens it generated (decoding, the
other half of a step's time). Each lane of the bench has a server of its own, so a lane's log holds
only its own requests; `ServerLog.mark` before a task and `ServerLog.since` after it
give that task's requests in order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
_CACHED = "Llama.generate: full prompt already cached"
_EVAL = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")
_GENERATED = re.compile(r"\s eval time =\s*[\d.]+ ms /\s*(\d+) runs")


@dataclass(frozen=True, slots=True)
class Prefill:
    """One request's prompt: tokens the server's cache held, tokens it evaluated; and the
    tokens it generated."""

    reused: int
    evaluated: int
    generated: int = 0

    @property
    def prompt(self) -> int:
        return self.reused + self.evaluated


def parse(lines: Iterable[str]) -> list[Prefill]:
    """The requests a stretch of server log records, in order."""
    found: list[Prefill] = []
    hit: Prefill | None = None
    for line in lines:
        if match := _HIT.search(line):
            hit = Prefill(int(match[1]), int(match[2]))
        elif _CACHED in line:
            hit = Prefill(0, 0)  # the whole prompt was held: its length is not logged
        elif match := _EVAL.search(line):
            # Without a prefix-match line the server evaluated the whole prompt.
            found.append(hit or Prefill(0, int(match[1])))
            hit = None
        elif (match := _GENERATED.search(line)) and found:
            # The line after its request's prompt line: what that request generated.
            last = found[-1]
            found[-1] = Prefill(last.reused, last.evaluated, int(match[1]))
    return found


class ServerLog:
    """One lane's server log, read from where the last task began."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size if self.path and self.path.exists() else 0

    def since(self) -> list[Prefill]:
        if self.path is None or not self.path.exists():
            return []
        with self.path.open("rb") as log:
            log.seek(self.offset)
            text = log.read().decode(errors="replace")
        return parse(text.splitlines())


@dataclass(frozen=True, slots=True)
class PrefillSummary:
    requests: int
    prompt: float  # tokens per request
    evaluated: float  # of them evaluated per request
    reused: float  # of them taken from the cache per request
    generated: float = 0.0  # tokens generated per request

    @property
    def hit(self) -> float:
        """The share of prompt tokens the cache held."""
        return self.reused / self.prompt if self.prompt else 0.0

    def line(self) -> str:
        return (
            f"{self.prompt:5.0f} prompt tok/step, {self.evaluated:4.0f} evaluated, "
            f"{self.reused:4.0f} reused ({self.hit:.0%} cache hit), "
            f"{self.generated:4.0f} generated"
        )


def summarise(prefills: Sequence[Prefill]) -> PrefillSummary:
    n = len(prefills)
    if not n:
        return PrefillSummary(0, 0.0, 0.0, 0.0)
    return PrefillSummary(
        n,
        sum(p.prompt for p in prefills) / n,
        sum(p.evaluated for p in prefills) / n,
        sum(p.reused for p in prefills) / n,
        sum(p.generated for p in prefills) / n,
    )


def steps_line(prefills: Sequence[Prefill]) -> str:
    """Each request as reused+evaluated>generated, e.g. `0+208>17 227+160>25`."""
    return " ".join(f"{p.reused}+{p.evaluated}>{p.generated}" for p in prefills)


__all__ = ["Prefill", "PrefillSummary", "ServerLog", "parse", "steps_line", "summarise"]
