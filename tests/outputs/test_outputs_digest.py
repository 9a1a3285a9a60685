"""The digest: kind detection, structure sketches, error lines, bounds, determinism."""

from __future__ import annotations

import json

import pytest

from tether_common.digest import MAX_DIGEST_CHARS, detect_kind, digest

REF = "out_" + "0" * 32


def make(data: bytes, media_type: str | None = None, hint: str | None = None) -> str:
    return digest(data, ref=REF, media_type=media_type, kind_hint=hint)


def test_json_gets_a_shape_sketch_and_a_path_call() -> None:
    doc = {"total": 3, "items": [{"id": i, "name": f"n{i}", "tags": ["a"]} for i in range(3)]}
    text = make(json.dumps(doc).encode())
    assert text.startswith(f"[Large json output stored as {REF}")
    assert (
        'Shape: {"total": int, "items": [3 x {"id": int, "name": str, "tags": [1 x str]}]}' in text
    )
    assert 'sample element [0]: {"id": 0, "name": "n0", "tags": ["a"]}' in text
    assert '"mode": "json", "path": "$.items[0]"' in text


def test_csv_and_tsv_get_header_row_count_and_rows() -> None:
    rows = "city,pop\n" + "".join(f"c{i},{i * 10}\n" for i in range(100))
    text = make(rows.encode())
    assert "Columns: city,pop" in text
    assert "Data rows: 100" in text
    assert "  c0,0" in text
    assert "  c99,990" in text
    assert '"mode": "csv", "columns": ["city"]' in text
    tsv = make(rows.replace(",", "\t").encode(), media_type="text/tab-separated-values")
    assert tsv.startswith("[Large tsv output")


def test_log_gets_exit_code_errors_warnings_and_tail() -> None:
    lines = [f"step {i}" for i in range(500)]
    lines[100] = "Traceback (most recent call last):"
    lines[101] = "ValueError: bad input"
    lines[250] = "WARNING: slow disk"
    lines += ["FAILED tests/test_x.py::test_y", "Process exited with code 3"]
    text = make(("\n".join(lines) + "\n").encode(), hint="shell")
    assert text.startswith("[Large log output")
    assert "Exit code: 3" in text
    assert "101: Traceback (most recent call last):" in text
    assert "102: ValueError: bad input" in text
    assert "501: FAILED tests/test_x.py::test_y" in text
    assert "251: WARNING: slow disk" in text
    assert "502: Process exited with code 3" in text
    assert '"offset": 452, "limit": 50' in text


def test_binary_is_never_decoded() -> None:
    data = bytes(range(256)) * 100
    assert detect_kind(data, None, None) == "binary"
    text = make(data)
    assert "First bytes (hex): 00 01 02" in text
    assert '"mode": "bytes"' in text


@pytest.mark.parametrize("hint", [None, "shell"])
def test_huge_inputs_stay_bounded(hint: str | None) -> None:
    line = b"error: " + b"x" * 5000 + b"\n"
    text = make(line * 4000, hint=hint)
    assert len(text) <= MAX_DIGEST_CHARS
    assert "retrieve_output" in text


def test_same_input_same_digest() -> None:
    data = json.dumps({"a": [1, 2, {"b": None}]}).encode()
    assert make(data) == make(data)
    log = b"".join(b"line %d\n" % i for i in range(20000)) + b"fatal: gone\n"
    assert make(log, hint="shell") == make(log, hint="shell")
