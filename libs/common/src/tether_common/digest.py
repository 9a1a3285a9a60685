"""The deterministic digest a model reads instead of a large tool output.

Same bytes in, same text out: kind, size, line count, head and tail lines, error-looking
lines with their numbers, a structure sketch for JSON and CSV/TSV, and the exact
`retrieve_output` calls that page the rest. Bounded to `MAX_DIGEST_CHARS` whatever the
input, and bounded in time: very large outputs are scanned at their head and tail only.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator
from typing import Any, Literal

Kind = Literal["json", "csv", "tsv", "log", "text", "binary"]
KIND_OF: dict[str, Kind] = {
    "json": "json", "csv": "csv", "tsv": "tsv", "log": "log", "text": "text", "binary": "binary"
}  # fmt: skip
# Tool names whose output is a log whatever it looks like.
LOG_TOOLS = frozenset({"shell", "bash", "run_command", "exec"})

MAX_DIGEST_CHARS = 3500
LINE_CHARS = 200  # each quoted line is cut here
SCAN_WINDOW = 8 * 1024 * 1024  # outputs larger than twice this are scanned at both ends
JSON_SKETCH_CAP = 8 * 1024 * 1024  # larger JSON is digested as text: parsing costs too much
# Arrays nested deeper than this are sketched as `[N x ...]` (objects stop at 3).
MAX_SKETCH_DEPTH = 12
# A key the digest may write as `.key` in a JSONPath; any other is written `["key"]`.
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_ERROR_LINES = 12
MAX_WARNING_LINES = 6

# Lines are found with `bytes.find` on these lowercase keywords (C speed), and only those
# lines are checked with the exact pattern: a regex over megabytes is far slower.
ERROR_KEYS = (b"error", b"exception", b"traceback", b"fail", b"fatal", b"panic", b"exit")
ERROR_WORD = re.compile(
    rb"(?i)(?:error|exception)\b|\b(?:traceback|failed|failure|fatal|panic)\b"
    rb"|non-zero exit|exit (?:code|status)[:= ]*[1-9]"
)
WARNING_KEYS = (b"warn",)
WARNING_WORD = re.compile(rb"(?i)\bwarn(?:ing)?\b")
MAX_CANDIDATES = 20_000  # lines checked per scanned window; beyond it the count is "N+"
EXIT_CODE = re.compile(
    rb"(?i)(?:exit(?:ed)?(?: with)? (?:code|status)|exit_code|returncode)[:= ]*(-?\d+)"
)


def clip(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + "..."


def line_count(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def head_lines(data: bytes, n: int) -> list[str]:
    return data[: 64 * 1024].decode(errors="replace").splitlines()[:n]


def tail_lines(data: bytes, n: int) -> list[str]:
    text = data[-64 * 1024 :].decode(errors="replace").splitlines()
    return text[-n:]


def detect_kind(data: bytes, media_type: str | None, kind_hint: str | None) -> Kind:
    head = data[:8192]
    if b"\x00" in head or not _utf8(head):
        return "binary"
    hint = "log" if kind_hint in LOG_TOOLS else kind_hint
    mt = (media_type or "").lower()
    looks_json = hint == "json" or "json" in mt or head.lstrip()[:1] in (b"{", b"[")
    if looks_json and len(data) <= JSON_SKETCH_CAP and _parses(data):
        return "json"
    if hint is not None and hint in KIND_OF and hint not in ("json", "binary"):
        return KIND_OF[hint]
    if "tab-separated" in mt:
        return "tsv"
    if "csv" in mt:
        return "csv"
    return _sniff_table(head) or "text"


def _utf8(head: bytes) -> bool:
    try:
        head.decode()
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3  # a character cut by the 8 KiB window is fine
    return True


def _parses(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, RecursionError):  # nested deeper than Python recurses: text
        return False
    return True


def _sniff_table(head: bytes) -> Kind | None:
    lines = head.decode(errors="replace").splitlines()[:6]
    if len(lines) < 2:
        return None
    for sep, kind in (("\t", KIND_OF["tsv"]), (",", KIND_OF["csv"])):
        counts = {line.count(sep) for line in lines[:-1] if line}
        if len(counts) == 1 and counts.pop() >= 1:
            return kind
    return None


def scanned(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, slice) pairs to scan: all of it, or its head and tail when very large."""
    if len(data) <= 2 * SCAN_WINDOW:
        yield 0, data
        return
    yield 0, data[:SCAN_WINDOW]
    tail_start = data.find(b"\n", len(data) - SCAN_WINDOW) + 1
    yield tail_start, data[tail_start:]


def candidate_starts(low: bytes, keys: tuple[bytes, ...]) -> list[int]:
    """Start offsets of lines of `low` (lowercased) holding any of `keys`, sorted."""
    starts: set[int] = set()
    for key in keys:
        pos = low.find(key)
        while pos >= 0 and len(starts) < MAX_CANDIDATES:
            starts.add(low.rfind(b"\n", 0, pos) + 1)
            end = low.find(b"\n", pos)
            pos = -1 if end < 0 else low.find(key, end)
    return sorted(starts)


def matching_lines(
    data: bytes, pattern: re.Pattern[bytes], keys: tuple[bytes, ...], cap: int
) -> tuple[list[str], int]:
    """The first `cap` lines matching `pattern` as "N: text", and how many match in all."""
    shown: list[str] = []
    total = 0
    for base, window in scanned(data):
        line_no, counted = data.count(b"\n", 0, base) + 1, 0
        for start in candidate_starts(window.lower(), keys):
            end = window.find(b"\n", start)
            line = window[start : len(window) if end < 0 else end]
            if pattern.search(line) is None:
                continue
            total += 1
            if len(shown) < cap:
                line_no += window.count(b"\n", counted, start)
                counted = start
                shown.append(f"{line_no}: {clip(line.decode(errors='replace'))}")
    return shown, total


def exit_code(data: bytes) -> int | None:
    found = EXIT_CODE.findall(data[-64 * 1024 :])
    return int(found[-1]) if found else None


def sketch(value: Any, depth: int = 0) -> str:
    """A type-shape of a JSON value: keys and types, array lengths, nested a few levels."""
    if isinstance(value, dict):
        if depth >= 3:
            return f"{{...{len(value)} keys}}"
        items = [f"{json.dumps(k)}: {sketch(v, depth + 1)}" for k, v in list(value.items())[:12]]
        more = f", ...+{len(value) - 12} keys" if len(value) > 12 else ""
        return "{" + ", ".join(items) + more + "}"
    if isinstance(value, list):
        if depth >= MAX_SKETCH_DEPTH:
            return f"[{len(value)} x ...]"
        inner = sketch(value[0], depth + 1) if value else ""
        return f"[{len(value)} x {inner}]" if value else "[]"
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(type(value), "?")


def member(key: str) -> str:
    """The JSONPath step to `key` (RFC 9535): `.key` for a plain name, else `["key"]`
    (a JSON string is also a JSONPath string literal)."""
    return f".{key}" if PLAIN_NAME.fullmatch(key) else f"[{json.dumps(key)}]"


def first_array(value: Any, path: str = "$") -> tuple[str, list[Any]] | None:
    """The first non-empty array met walking the document (breadth first), with its path."""
    queue: deque[tuple[str, Any]] = deque([(path, value)])
    while queue:
        where, item = queue.popleft()
        if isinstance(item, list) and item:
            return where, item
        if isinstance(item, dict):
            queue.extend((where + member(k), v) for k, v in item.items())
    return None


def json_section(data: bytes, ref: str) -> list[str]:
    document = json.loads(data)
    out = ["Shape: " + clip_long(sketch(document), 1200)]
    found = first_array(document)
    if found is not None:
        where, items = found
        sample = clip_long(json.dumps(items[0], sort_keys=False), 600)
        out += [f"Array {where} has {len(items)} items; sample element [0]: {sample}"]
        call = {"ref": ref, "mode": "json", "path": f"{where}[0]"}
        out += [f"Query a path: retrieve_output {json.dumps(call)}"]
    return out


def clip_long(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def table_section(data: bytes, kind: Kind, ref: str, lines: int) -> list[str]:
    rows = head_lines(data, 4)
    header = rows[0] if rows else ""
    out = [f"Columns: {clip(header)}", f"Data rows: {max(lines - 1, 0)}"]
    out += ["First rows:", *(f"  {clip(r)}" for r in rows[1:4])]
    out += ["Last row:", f"  {clip(tail_lines(data, 1)[0])}"] if lines > 4 else []
    first_col = header.split("\t" if kind == "tsv" else ",")[0]
    call = {"ref": ref, "mode": "csv", "columns": [first_col], "offset": 0, "limit": 50}
    out += [f"Pick columns: retrieve_output {json.dumps(call)}"]
    return out


def log_section(data: bytes, ref: str) -> list[str]:
    out: list[str] = []
    code = exit_code(data)
    if code is not None:
        out.append(f"Exit code: {code}")
    out += listing(data, ERROR_WORD, ERROR_KEYS, MAX_ERROR_LINES, "Error-looking lines")
    out += listing(data, WARNING_WORD, WARNING_KEYS, MAX_WARNING_LINES, "Warning lines")
    call = {"ref": ref, "mode": "grep", "pattern": "error|fail|exception", "ignore_case": True}
    out.append(f"Search it: retrieve_output {json.dumps(call)}")
    return out


def listing(
    data: bytes, pattern: re.Pattern[bytes], keys: tuple[bytes, ...], cap: int, title: str
) -> list[str]:
    shown, total = matching_lines(data, pattern, keys, cap)
    if not total:
        return [f"{title}: none"]
    partial = " (head and tail scanned)" if len(data) > 2 * SCAN_WINDOW else ""
    more = "+" if total >= MAX_CANDIDATES else ""  # the candidate cap stopped the count
    return [f"{title} ({total}{more}{partial}, first {len(shown)}):", *(f"  {s}" for s in shown)]


def head_tail(data: bytes, lines: int, n: int) -> list[str]:
    if lines <= 2 * n:
        return ["Content:", *(f"  {clip(x)}" for x in head_lines(data, 2 * n))]
    first = [f"  {i + 1}: {clip(x)}" for i, x in enumerate(head_lines(data, n))]
    tail = tail_lines(data, n)
    last = [f"  {lines - len(tail) + i + 1}: {clip(x)}" for i, x in enumerate(tail)]
    return [f"First {n} lines:", *first, f"Last {len(tail)} lines:", *last]


def binary_section(data: bytes, ref: str) -> list[str]:
    call = {"ref": ref, "mode": "bytes", "offset": 0, "limit": 4096}
    return [
        f"First bytes (hex): {data[:32].hex(' ')}",
        f"Read bytes: retrieve_output {json.dumps(call)}",
    ]


def body(data: bytes, kind: Kind, ref: str, lines: int) -> list[str]:
    match kind:
        case "binary":
            return binary_section(data, ref)
        case "json":
            return json_section(data, ref) + head_tail(data, lines, 3)
        case "csv" | "tsv":
            return table_section(data, kind, ref, lines)
        case "log":
            return head_tail(data, lines, 5) + log_section(data, ref)
        case "text":
            return head_tail(data, lines, 5) + listing(
                data, ERROR_WORD, ERROR_KEYS, MAX_ERROR_LINES, "Error-looking lines"
            )


def digest(data: bytes, *, ref: str, media_type: str | None, kind_hint: str | None) -> str:
    """The digest of `data`, stored under `ref`; at most `MAX_DIGEST_CHARS` characters."""
    kind = detect_kind(data, media_type, kind_hint)
    lines = line_count(data) if kind != "binary" else 0
    shape = f"{lines} lines, " if kind != "binary" else ""
    top = [f"[Large {kind} output stored as {ref}: {len(data)} bytes, {shape}shown as a digest]"]
    page = {"ref": ref, "offset": 0, "limit": 200}
    tail = {"ref": ref, "offset": max(lines - 50, 0), "limit": 50}
    calls = [
        f"Page it by line: retrieve_output {json.dumps(page)}",
        f"Read the end: retrieve_output {json.dumps(tail)}",
    ]
    text = "\n".join([*top, *body(data, kind, ref, lines), *(calls if lines else [])])
    if len(text) > MAX_DIGEST_CHARS:
        keep = MAX_DIGEST_CHARS - len(calls[0]) - 20
        text = text[:keep] + "\n...(digest cut)\n" + calls[0]
    return text


__all__ = ["KIND_OF", "MAX_DIGEST_CHARS", "Kind", "detect_kind", "digest"]
