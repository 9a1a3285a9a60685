"""Error codes are declared once (`tether_common.errors.ErrorCode`) with their HTTP status,
retryability and class: the services answer by that table and the client maps it back."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from tether_client.client import raise_for_error
from tether_common.errors import (
    CODES,
    AuthError,
    ConflictError,
    ErrorCode,
    MessageError,
    NotFoundError,
    RemoteError,
    StoreError,
    TetherError,
    from_wire,
)
from tether_common.http import install_error_handlers

ROOT = Path(__file__).resolve().parents[2]
# `code="..."` given to an error or an error event, wherever the services spell one (a
# keyword argument: assignments like `code = "approval_stale"` are tool outcomes).
CODE_ARGUMENT = re.compile(r"""\bcode=["']([a-z_]+)["']""")


def test_every_code_has_exactly_one_row() -> None:
    assert set(CODES) == set(ErrorCode)
    for code, spec in CODES.items():
        assert 400 <= spec.status < 600, code
        # A client error is never worth repeating as it is, but for 429 (a quota): the
        # same request succeeds once its `retry_after` has passed.
        assert not (spec.retryable and spec.status < 500 and spec.status != 429), code


def test_every_code_the_tree_spells_is_declared() -> None:
    sources = [*ROOT.glob("libs/*/src/**/*.py"), *ROOT.glob("services/*/src/**/*.py")]
    assert len(sources) > 100
    unknown = {
        f"{path.relative_to(ROOT)}: {found}"
        for path in sources
        for found in CODE_ARGUMENT.findall(path.read_text(encoding="utf-8"))
        if found not in set(ErrorCode)
    }
    assert not unknown, "declare these in tether_common.errors.ErrorCode:\n" + "\n".join(
        sorted(unknown)
    )


@pytest.mark.parametrize("code", list(ErrorCode))
async def test_http_answers_and_the_client_reads_back_each_code(code: ErrorCode) -> None:
    app = FastAPI()
    install_error_handlers(app, "test")

    @app.get("/fail")
    async def fail() -> None:
        raise TetherError(f"failed with {code}", code=code)

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/fail")
    assert response.status_code == code.spec.status
    assert response.json()["error"] == {"code": code.value, "message": f"failed with {code}"}
    with pytest.raises(TetherError) as caught:
        raise_for_error(response)
    assert type(caught.value) is code.spec.error
    assert (caught.value.code, caught.value.retryable) == (code, code.spec.retryable)


def test_a_raise_site_may_say_retryable_for_one_error() -> None:
    assert StoreError("x").retryable is True
    assert StoreError("x", code=ErrorCode.STORE_UNAVAILABLE).retryable is False
    assert StoreError("x", retryable=False).retryable is False
    assert from_wire("store_error", "x", retryable=False).retryable is False


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("not_found", NotFoundError),
        ("expired", NotFoundError),
        ("already_decided", ConflictError),
        ("forbidden", AuthError),
        ("invalid_request", MessageError),
        ("a_code_from_a_newer_service", RemoteError),
    ],
)
def test_from_wire_picks_the_class_of_the_code(code: str, cls: type[TetherError]) -> None:
    found = from_wire(code, "m")
    assert type(found) is cls
    assert found.code == code
