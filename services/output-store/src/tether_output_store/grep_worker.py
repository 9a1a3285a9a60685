"""`python -m tether_output_store.grep_worker SPEC PID`: search stdin line by line.

The pattern is RE2 (linear time, checked by `tether_common.patterns`); it still runs in its
own process so a search over a huge output can be killed when its time budget runs out,
and the service itself never runs a model-supplied pattern. Writes one JSON
object per line: `{"n", "text", "hit"}` for shown lines, `{"total"}` at the end.
"""

from __future__ import annotations

import json
import sys
from collections import deque
from typing import IO, Any

from tether_common.patterns import PatternProblem, compile_pattern
from tether_output_store.workers import READY, worker_spec

# Only this much of each line is searched and shown: bounds the work per line.
MAX_LINE_CHARS = 4000


def emit(out: IO[str], record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")


def search(spec: dict[str, Any], source: IO[bytes], out: IO[str]) -> None:
    # The budget is the parent's to enforce (it kills this process): no deadline here.
    pattern = compile_pattern(spec["pattern"], ignore_case=spec["ignore_case"], budget_s=1e9)
    if isinstance(pattern, PatternProblem):  # the service checked it; never expected here
        emit(out, {"error": pattern.code, "message": pattern.message})
        return
    context, skip, limit = spec["context"], spec["skip"], spec["limit"]
    before: deque[tuple[int, str]] = deque(maxlen=context)
    total, after, last_shown = 0, 0, 0
    for number, raw in enumerate(source, start=1):
        text = raw.decode(errors="replace").rstrip("\r\n")[:MAX_LINE_CHARS]
        hit = pattern.search(text)
        total += hit
        showing = hit and skip < total <= skip + limit
        if showing:
            for n, prior in before:
                if n > last_shown:
                    emit(out, {"n": n, "text": prior, "hit": False})
            emit(out, {"n": number, "text": text, "hit": True})
            last_shown, after = number, context
        elif after and not hit:
            emit(out, {"n": number, "text": text, "hit": False})
            last_shown, after = number, after - 1
        before.append((number, text))
    emit(out, {"total": total})
    out.flush()


if __name__ == "__main__":
    spec = worker_spec()
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    search(spec, sys.stdin.buffer, sys.stdout)
