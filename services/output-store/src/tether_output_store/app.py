"""Composition root of the output-store: put/get on the bus, download over HTTP."""

from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path

from fastapi import FastAPI

from tether_common.errors import MessageError
from tether_common.http import operator_token_hashes
from tether_common.messages.outputs import GetOutput, OutputContent, OutputStored, PutOutput
from tether_common.service import Service
from tether_common.settings import CommonSettings
from tether_output_store.api import outputs_router
from tether_output_store.settings import OutputSettings
from tether_output_store.store import OutputStore

SERVICE = "output-store"


def decode_content(body: PutOutput) -> bytes:
    if body.encoding == "utf-8":
        return body.content.encode()
    try:
        return base64.b64decode(body.content, validate=True)
    except ValueError:
        raise MessageError("content is not valid base64", code="invalid_message") from None


def create_app(common: CommonSettings, settings: OutputSettings) -> FastAPI:
    service = Service(SERVICE, common, migrations=Path(__file__).parent / "migrations")
    tokens = operator_token_hashes(common.operator_token)
    store = OutputStore(
        service.engine,
        chunk_bytes=settings.chunk_bytes,
        retention=timedelta(days=settings.retention_days),
    )

    async def put(body: PutOutput) -> OutputStored:
        stored = await store.put(body.run_id, decode_content(body), body.media_type)
        return OutputStored(
            ref=stored.ref, size=stored.size, sha256=stored.sha256, expires_at=stored.expires_at
        )

    async def get(body: GetOutput) -> OutputContent:
        stored, data = await store.read(body.ref, body.run_id, body.offset, body.limit)
        try:
            text, encoding = data.decode(), "utf-8"
        except UnicodeDecodeError:  # binary, or a page cut inside a character
            text, encoding = base64.b64encode(data).decode(), "base64"
        return OutputContent(
            ref=body.ref,
            size=stored.size,
            offset=body.offset,
            encoding=encoding,
            content=text,
            eof=body.offset + len(data) >= stored.size,
        )

    async def on_start() -> None:
        await service.bus.serve(service.subjects.output_put, put)
        await service.bus.serve(service.subjects.output_get, get)

    return service.app(
        title="Tether output-store", on_start=on_start, routers=[outputs_router(store, tokens)]
    )
