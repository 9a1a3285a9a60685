"""`python -m tether_output_store.json_worker SPEC PID`: run a JSON path over stdin.

Runs apart from the service because a path over a large document (a descent, a filter
per element) can take long; the parent kills it when its budget runs out. Its memory is
capped too (`RLIMIT_AS`). Writes one JSON object: `{"text", "note"}`, or `{"error",
"message"}`.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import IO, Any

# python-jsonpath imports the `regex` module, if installed, for its own `match` and
# `search`; ours run on RE2 instead (jsonpath.Re2Function), so skip that slow import.
sys.modules.setdefault("regex", None)  # type: ignore[arg-type]

from tether_common.errors import ErrorCode, MessageError  # noqa: E402
from tether_output_store.jsonpath import select  # noqa: E402
from tether_output_store.workers import READY, worker_spec  # noqa: E402


def answer(spec: dict[str, Any], source: IO[bytes]) -> dict[str, Any]:
    try:
        document = json.loads(source.read())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return {"error": ErrorCode.NOT_JSON, "message": f"output is not JSON: {exc}"}
    except RecursionError:
        message = "output is JSON nested too deeply to query; page it by lines instead"
        return {"error": ErrorCode.TOO_LARGE, "message": message}
    try:
        found = select(document, spec["path"], max_bytes=spec["max_bytes"])
    except MessageError as exc:
        return {"error": exc.code, "message": exc.message}
    return {"text": found.text, "note": found.note}


def main() -> None:
    spec = worker_spec()
    limit = int(spec["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    try:
        record = answer(spec, sys.stdin.buffer)
    except MemoryError:
        message = "the query needed more memory than a query may use; narrow the path"
        record = {"error": ErrorCode.TOO_LARGE, "message": message}
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
