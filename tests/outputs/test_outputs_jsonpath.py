"""JSON path queries (`python-jsonpath`): the forms RFC 9535 gives (`..`, slices, `[-1]`,
filters) and the older dotted index; every path a digest suggests is one the query
accepts and answers; and hostile paths and documents end in a clear error or a bounded
answer, in the service within its time budget."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether_common.bus import Bus
from tether_common.digest import digest
from tether_common.errors import ErrorCode, MessageError, TetherError
from tether_common.messages.outputs import OutputPage, QueryOutput
from tether_output_store.jsonpath import MAX_MATCHES, legacy_to_rfc, select
from tether_tools_runner.offload import upload

DOC = {
    "data": {
        "items": [
            {"name": "a", "price": 5, "tags": ["x"]},
            {"name": "b", "price": 15, "tags": []},
            {"name": "c", "price": 25, "tags": ["y", "z"]},
        ],
        "odd key": {"0": "zero", "a.b": True},
    }
}


def value(path: str, document: Any = DOC) -> Any:
    return json.loads(select(document, path, max_bytes=1 << 20).text)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("$.data.items[0].name", "a"),
        ("data.items.1.name", "b"),
        ("$.data.items[-1].name", "c"),
        ("$.data.items[1:].name", ["b", "c"]),
        ("$.data.items[::2].price", [5, 25]),
        ("$.data.items[*].name", ["a", "b", "c"]),
        ("$..name", ["a", "b", "c"]),
        ("$..tags[-1]", ["x", "z"]),
        ("$.data.items[?@.price > 10].name", ["b", "c"]),
        ("$.data.items[?@.price > 1.5 && @.name != 'c'].name", ["a", "b"]),
        ("$.data.items[?length(@.tags) == 0].name", ["b"]),
        ('$.data["odd key"]["a.b"]', True),
        ('$["data"]["odd key"].0', "zero"),
        ("$.data.items[7].name", "nothing"),
        ("$.data.items[?@.price > 100]", []),
    ],
)
def test_the_path_forms(path: str, expected: Any) -> None:
    if expected == "nothing":
        with pytest.raises(
            MessageError, match=r"\$.data.items has no index 7 \(3 items\)"
        ) as caught:
            value(path)
        assert caught.value.code == ErrorCode.INVALID_PATH
        return
    assert value(path) == expected


def test_the_dotted_index_leaves_quoted_names_and_filters_alone() -> None:
    assert legacy_to_rfc("a.0.b.12") == "a[0].b[12]"
    assert legacy_to_rfc('$["x.0"].1') == '$["x.0"][1]'
    assert legacy_to_rfc("$.a[?@.p > 1.5]") == "$.a[?@.p > 1.5]"


# Keys of every kind: the digest must quote the ones that are not plain names.
KEYS = st.text(min_size=0, max_size=8) | st.sampled_from(["a", "b_1", "$", "..", "*", "0", "-"])
SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=6)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)


@st.composite
def documents_with_an_array(draw: st.DrawFn) -> Any:
    """A document with at least one non-empty array somewhere below nested objects."""
    document: Any = draw(st.lists(JSON_VALUES, min_size=1, max_size=3))
    for key in draw(st.lists(KEYS, max_size=4)):
        siblings = draw(st.dictionaries(KEYS, JSON_VALUES, max_size=3))
        document = {**siblings, key: document}
    return document


SUGGESTED = re.compile(r"retrieve_output (\{.*\})")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents_with_an_array())
def test_every_path_a_digest_suggests_is_answered(document: Any) -> None:
    data = json.dumps(document).encode()
    text = digest(data, ref="out_t", media_type="application/json", kind_hint=None)
    calls = [json.loads(found) for found in SUGGESTED.findall(text)]
    paths = [call["path"] for call in calls if call.get("mode") == "json"]
    assert paths, text
    for path in paths:
        assert path.endswith("[0]")
        answered = value(path, document)
        # The suggested path names the first element of an array the digest met.
        assert answered in _arrays_first_elements(document)


def _arrays_first_elements(document: Any) -> list[Any]:
    found, stack = [], [document]
    while stack:
        item = stack.pop()
        if isinstance(item, list) and item:
            found.append(item[0])
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else []
        )
        stack.extend(children)
    return found


TOKENS = st.sampled_from(
    ["$", ".", "..", "*", "[", "]", "[*]", "[-1]", "[0:", ":2]", "?", "@", "==", ">", "&&",
     "||", "!", "(", ")", "'", '"', "a", "0", "-1", "length(", "match(", "search(", ",",
     " ", "\\", "$..*", "[?@]", "\ud7ff", "|", "&", "_"]
)  # fmt: skip


def outcome(path: str) -> str:
    """ "ok" with a JSON answer, else the error's code and message."""
    try:
        found = select(DOC, path, max_bytes=4096)
    except MessageError as exc:
        return f"{exc.code}: {exc.message}"
    json.loads(found.text)
    return "ok"


@settings(max_examples=300, deadline=None)
@given(st.lists(TOKENS, max_size=25).map("".join))
def test_any_path_is_an_answer_or_an_invalid_path(path: str) -> None:
    answer = outcome(path)
    assert answer == "ok" or answer.startswith("invalid_path: "), answer
    assert "JSON path" in answer or answer == "ok"


def test_filter_regexes_run_in_linear_time() -> None:
    # `(a|a)+` against 40 a's and a "!" takes a backtracking engine 2^40 steps.
    texts = {"xs": ["a" * 40 + "!", "aaa", "ba"]}
    assert value("$.xs[?match(@, '(a|a)+')]", texts) == ["aaa"]
    assert value("$.xs[?search(@, '(a|a)+!')]", texts) == ["a" * 40 + "!"]
    assert value("$.xs[?match(@, 'a)|(b')]", texts) == []  # invalid alone: false, not "b"
    assert value("$.xs[?search(@, '(?P<x>a)(?P=x)')]", texts) == []  # no backreferences


def test_matches_and_bytes_shown_are_bounded() -> None:
    wide = {"xs": list(range(MAX_MATCHES * 3))}
    many = select(wide, "$.xs[*]", max_bytes=10**9)
    assert len(json.loads(many.text)) == MAX_MATCHES
    assert many.note is not None
    # `$..*` matches the whole array first: past `max_bytes`, no more are taken.
    few = select(wide, "$..*", max_bytes=1000)
    assert json.loads(few.text) == [wide["xs"]]
    assert few.note is not None
    assert "first" in few.note


def test_a_descent_through_a_deep_document_is_bounded() -> None:
    deep: Any = "bottom"
    for _ in range(300):
        deep = {"a": deep}
    found = select(deep, "$..a", max_bytes=4096)
    # The first match alone is past 4096 bytes: the second is taken, then it stops.
    assert len(json.loads(found.text)) == 2
    assert found.note is not None


# ---- through the service: the worker process, its budget and its errors -------------


async def query(bus: Bus, ref: str, run_id: str, **kw: object) -> OutputPage:
    body = QueryOutput.model_validate({"ref": ref, "run_id": run_id, "mode": "json", **kw})
    return await bus.request(bus.subjects.output_query, body, timeout=60)


async def test_the_service_answers_the_rfc_forms(obus: Bus, owner: str) -> None:
    ref = (await upload(obus, owner, json.dumps(DOC).encode())).ref
    page = await query(obus, ref, owner, path="$.data.items[?@.price > 10].name")
    assert json.loads(page.content) == ["b", "c"]
    last = await query(obus, ref, owner, path="$.data.items[-1].tags[-1]")
    assert json.loads(last.content) == "z"
    with pytest.raises(TetherError) as bad:
        await query(obus, ref, owner, path="$.data[?@.price >")
    assert bad.value.code == "invalid_path"


@pytest.mark.parametrize(
    ("document", "path", "code"),
    [
        # Each `..*` multiplies the work by the depth; nothing matches `.nope` at the end.
        ({"a": [[[[[[[[list(range(200))]]]]]]]] * 40}, "$..*..*..*..*..*.nope", "too_large"),
        ("[" * 100_000 + "]" * 100_000, "$[0]", "too_large"),
        ("not json at all", "$.a", "not_json"),
    ],
)
async def test_hostile_queries_end_in_a_clear_error(
    obus: Bus, owner: str, document: Any, path: str, code: str
) -> None:
    data = document.encode() if isinstance(document, str) else json.dumps(document).encode()
    ref = (await upload(obus, owner, data)).ref
    with pytest.raises(TetherError) as caught:
        await query(obus, ref, owner, path=path)
    assert caught.value.code == code, caught.value.message
    assert caught.value.message
