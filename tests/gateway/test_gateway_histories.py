"""The gateway's kept histories (`tether_gateway.histories`): a request sent as a delta
after a kept prefix becomes exactly the whole request; a prefix not held is refused with
`prefix_unknown`; the cache keeps at most its bound, least recently used out first; and
a history that differs from a kept one in any byte never takes its place, nor does a hit
bring anything but the messages (provider, model and tools are the request's own)."""

from __future__ import annotations

from typing import Any

import pytest

from tether_common.errors import ErrorCode, MessageError, NotFoundError
from tether_common.messages.gateway import (
    HISTORY_ROOT,
    CallRecord,
    ChatMessage,
    GenerateRequest,
    OfferedToolSpec,
    history_digest,
)
from tether_gateway.histories import MESSAGE_OVERHEAD, HistoryCache, Kept, expanded

SYSTEM = ChatMessage(role="system", content="rules")
NOTE = ChatMessage(role="system", content="Budget left: 3 of 9 steps.")


def step(i: int, **arguments: Any) -> list[ChatMessage]:
    call = CallRecord(id=f"c{i}", name="calculate", arguments=arguments or {"expression": f"{i}"})
    return [
        ChatMessage(role="assistant", tool_calls=[call]),
        ChatMessage(role="tool", content=f"result {i}", tool_call_id=call.id, name=call.name),
    ]


def history(steps: int) -> list[ChatMessage]:
    out = [SYSTEM, ChatMessage(role="user", content="the question")]
    for i in range(steps):
        out += step(i)
    return out


def whole(messages: list[ChatMessage], **fields: Any) -> GenerateRequest:
    """A step's request: the history, then the closing note; keeping the history."""
    return GenerateRequest(
        run_id="run_a",
        provider="scripted",
        messages=[*messages, NOTE],
        keep=len(messages),
        **fields,
    )


def digest_of(messages: list[ChatMessage]) -> str:
    return history_digest(HISTORY_ROOT, [m.model_dump_json() for m in messages]).hex()


def delta(after: list[ChatMessage], new: list[ChatMessage], **fields: Any) -> GenerateRequest:
    return GenerateRequest(
        run_id="run_a",
        provider="scripted",
        prefix_digest=digest_of(after),
        messages=[*new, NOTE],
        keep=len(after) + len(new),
        **fields,
    )


def test_a_delta_after_a_kept_history_is_the_whole_request() -> None:
    cache = HistoryCache(2**20)
    first = history(3)
    assert expanded(cache, whole(first)).messages == [*first, NOTE]
    assert len(cache) == 1
    # Step after step, only what is new: each expands to the whole history.
    kept = first
    for i in range(3, 8):
        new = step(i)
        got = expanded(cache, delta(kept, new))
        assert got.messages == [*kept, *new, NOTE]
        assert (got.prefix_digest, got.keep) == (None, None)
        kept = [*kept, *new]
    # The prefix a run has moved past is dropped: one kept history per conversation.
    assert len(cache) == 1
    assert cache.get(bytes.fromhex(digest_of(kept))) is not None


def test_a_whole_request_keeping_nothing_passes_as_it_came() -> None:
    cache = HistoryCache(2**20)
    request = GenerateRequest(run_id="r", provider="scripted", messages=history(2))
    assert expanded(cache, request) is request
    assert len(cache) == 0


def test_a_prefix_not_held_is_refused_as_prefix_unknown() -> None:
    cache = HistoryCache(2**20)
    with pytest.raises(NotFoundError) as refused:
        expanded(cache, delta(history(2), step(2)))
    assert refused.value.code == ErrorCode.PREFIX_UNKNOWN
    assert "send the whole history" in refused.value.message


def test_keep_past_the_end_of_the_history_is_invalid() -> None:
    cache = HistoryCache(2**20)
    request = whole(history(1)).model_copy(update={"keep": 99})
    with pytest.raises(MessageError) as refused:
        expanded(cache, request)
    assert refused.value.code == ErrorCode.INVALID_MESSAGE
    assert len(cache) == 0


def test_the_cache_holds_its_bound_and_evicts_the_least_recently_used() -> None:
    one = history(4)
    size = sum(len(m.model_dump_json()) + MESSAGE_OVERHEAD for m in one)
    cache = HistoryCache(3 * size)
    digests = []
    for run in range(3):
        messages = [*one[:-1], ChatMessage(role="user", content=f"run {run}!")]
        expanded(cache, whole(messages))
        digests.append(bytes.fromhex(digest_of(messages)))
    assert len(cache) == 3
    assert cache.size <= cache.max_bytes
    assert cache.get(digests[0]) is not None  # touched: now the most recently used
    expanded(cache, whole([*one[:-1], ChatMessage(role="user", content="run 3!")]))
    assert len(cache) == 3
    assert cache.size <= cache.max_bytes
    assert cache.get(digests[1]) is None  # the least recently used went
    assert cache.get(digests[0]) is not None
    assert cache.get(digests[2]) is not None
    # One history larger than the whole bound is not kept (and evicts nothing).
    expanded(cache, whole(history(40)))
    assert len(cache) == 3
    assert cache.size <= cache.max_bytes


def test_an_empty_bound_keeps_nothing() -> None:
    cache = HistoryCache(0)
    expanded(cache, whole(history(2)))
    assert (len(cache), cache.size) == (0, 0)


def test_the_digest_is_over_the_exact_bytes_of_each_message_in_order() -> None:
    messages = history(2)
    texts = [m.model_dump_json() for m in messages]
    chained = HISTORY_ROOT
    for text in texts:
        chained = history_digest(chained, [text])
    assert chained == history_digest(HISTORY_ROOT, texts)
    # Not the concatenation: moving a boundary between two messages changes the digest.
    moved = [texts[0] + texts[1][:5], texts[1][5:], *texts[2:]]
    assert history_digest(HISTORY_ROOT, moved) != history_digest(HISTORY_ROOT, texts)


def _changed(messages: list[ChatMessage], index: int, **update: Any) -> list[ChatMessage]:
    out = list(messages)
    out[index] = out[index].model_copy(update=update)
    return out


def _call_changed(messages: list[ChatMessage], arguments: dict[str, Any]) -> list[ChatMessage]:
    call = CallRecord(id="c0", name="calculate", arguments=arguments)
    return _changed(messages, 2, tool_calls=[call])


KEPT = history(3)
# Histories as long as KEPT that differ from it somewhere: each must miss.
OTHERS: dict[str, list[ChatMessage]] = {
    "one character of the system prompt": _changed(KEPT, 0, content="rulez"),
    "one character of the question": _changed(KEPT, 1, content="the question!"),
    "trailing space": _changed(KEPT, 1, content="the question "),
    "a role": _changed(KEPT, 1, role="system"),
    "a tool result": _changed(KEPT, 3, content="result 9"),
    "a call id": _changed(KEPT, 3, tool_call_id="c9"),
    "a tool name": _changed(KEPT, 3, name="calculator"),
    "an int argument for a string": _call_changed(KEPT, {"expression": 0}),
    "1.0 for 1": _call_changed(_call_changed(KEPT, {"x": 1}), {"x": 1.0}),
    "true for 1": _call_changed(KEPT, {"x": True}),
    "arguments in another order": _call_changed(KEPT, {"b": 1, "expression": "0"}),
    "two messages swapped": [KEPT[0], KEPT[1], KEPT[3], KEPT[2], *KEPT[4:]],
    "the last message dropped": [*KEPT[:-1], ChatMessage(role="user", content="result 2")],
    "unicode look-alike": _changed(KEPT, 1, content="the quеstion"),  # Cyrillic е
}


@pytest.mark.parametrize("other", OTHERS.values(), ids=OTHERS.keys())
def test_a_different_history_never_reuses_a_kept_prefix(other: list[ChatMessage]) -> None:
    cache = HistoryCache(2**20)
    expanded(cache, whole(KEPT))
    assert digest_of(other) != digest_of(KEPT)
    # Asked as the sender of `other` would (its own digest): not held.
    with pytest.raises(NotFoundError):
        expanded(cache, delta(other, step(9)))
    # Kept by another run, it stands beside the first; each expands to its own.
    expanded(cache, whole(other))
    assert expanded(cache, delta(other, [])).messages == [*other, NOTE]
    assert expanded(cache, delta(KEPT, [])).messages == [*KEPT, NOTE]


def test_a_hit_brings_only_messages_the_rest_is_the_requests_own() -> None:
    """Another run (another tenant) kept the same history with its own provider, model,
    tools and settings: a request naming it gets those messages and nothing else."""
    cache = HistoryCache(2**20)
    tool = OfferedToolSpec(name="theirs", description="d", parameters={"type": "object"})
    expanded(
        cache,
        whole(KEPT, model="their-model", tools=[tool], effort="low", max_output_tokens=7),
    )
    mine = delta(KEPT, step(3), model="my-model", tool_choice="required").model_copy(
        update={"run_id": "run_b", "provider": "openai"}
    )
    got = expanded(cache, mine)
    assert got.messages == [*KEPT, *step(3), NOTE]
    assert (got.run_id, got.provider, got.model) == ("run_b", "openai", "my-model")
    assert (got.tools, got.effort, got.max_output_tokens) == ([], "normal", None)
    assert got.tool_choice == "required"


def test_what_a_provider_does_to_its_request_list_leaves_the_kept_history_alone() -> None:
    cache = HistoryCache(2**20)
    got = expanded(cache, whole(KEPT))
    got.messages[1] = ChatMessage(role="user", content="rewritten by an adapter")
    got.messages.insert(0, ChatMessage(role="system", content="a tool prompt"))
    again = expanded(cache, delta(KEPT, []))
    assert again.messages == [*KEPT, NOTE]
    kept = cache.get(bytes.fromhex(digest_of(KEPT)))
    assert isinstance(kept, Kept)
    assert kept.messages == tuple(KEPT)
