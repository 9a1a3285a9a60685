"""The bus decoder's one-pass path (pydantic's own JSON parser) gives the answers of the
classifying path: the same body, or the same error for NaN/Infinity, a version it does
not support, an error reply, text JSON can carry but PostgreSQL cannot."""

from __future__ import annotations

import json

import pytest

from tether_common.errors import ErrorCode, MessageError, TetherError
from tether_common.messages.base import WireModel, WireRequest, decode, decode_reply
from tether_common.messages.gateway import GenerateRequest, ModelEventMessage


class Note(WireRequest):
    text: str
    weight: float = 0.0


def code_of(model: type[WireModel], data: bytes) -> str:
    with pytest.raises(MessageError) as caught:
        decode(model, data)
    return caught.value.code


def test_a_plain_body_decodes_as_the_model_says() -> None:
    body = {
        "run_id": "run_1",
        "provider": "scripted",
        "messages": [{"role": "user", "content": 'NaN-free, quotes " and \u00e9'}],
    }
    data = json.dumps(body).encode()
    assert decode(GenerateRequest, data) == GenerateRequest.model_validate(body)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_constants_are_not_json(constant: str) -> None:
    assert code_of(Note, f'{{"text": "x", "weight": {constant}}}'.encode()) == ErrorCode.NOT_JSON


def test_the_words_inside_a_string_are_only_text() -> None:
    assert decode(Note, b'{"text": "NaN and Infinity"}').text == "NaN and Infinity"


def test_an_unsupported_version_is_named() -> None:
    assert code_of(Note, b'{"version": 2, "text": "x"}') == ErrorCode.UNSUPPORTED_VERSION


def test_a_lone_surrogate_is_refused_as_before() -> None:
    # pydantic's parser refuses the escape; the classifying path finds it in the text.
    assert code_of(Note, b'{"text": "\\ud800"}') == ErrorCode.INVALID_MESSAGE


def test_wrong_shapes_and_non_json_keep_their_codes() -> None:
    assert code_of(Note, b'{"text": 1, "extra": 2}') == ErrorCode.INVALID_MESSAGE
    assert code_of(Note, b"[1, 2]") == ErrorCode.INVALID_MESSAGE
    assert code_of(Note, b"{not json") == ErrorCode.NOT_JSON


def test_an_error_reply_raises_and_an_event_named_error_decodes() -> None:
    reply = b'{"version": 1, "error": {"code": "timeout", "message": "slow"}}'
    with pytest.raises(TetherError) as caught:
        decode_reply(ModelEventMessage, reply)
    assert caught.value.code == "timeout"
    event = b'{"event": {"kind": "error", "code": "x", "message": "an \\"error\\""}}'
    assert decode_reply(ModelEventMessage, event).event.kind == "error"
    chunk = b'{"event": {"kind": "chunk", "text": "fine"}}'
    assert decode_reply(ModelEventMessage, chunk).terminal is False
