"""Composition root of the output-store: put, chunked upload and queries on the bus,
the collector in the background, download over HTTP; chunk bytes in PostgreSQL or the
JetStream object store as `TETHER_OUTPUTS_BACKEND` says."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from fastapi import FastAPI

from tether_common.identity import TokenStore
from tether_common.service import Service
from tether_common.settings import CommonSettings
from tether_output_store import api
from tether_output_store.handlers import Handlers
from tether_output_store.objects import BlobBucket
from tether_output_store.query import QueryLimits
from tether_output_store.retention import Collector
from tether_output_store.settings import OutputSettings
from tether_output_store.store import OutputStore
from tether_output_store.uploads import Uploads

SERVICE = "output-store"


def create_app(common: CommonSettings, settings: OutputSettings) -> FastAPI:
    service = Service(SERVICE, common, migrations=Path(__file__).parent / "migrations")
    # Always at hand, whatever the backend: chunks written under the other one stay
    # readable and collectable. Only the writing backend creates the bucket.
    objects = BlobBucket(
        service.bus,
        service.subjects.output_bucket,
        replicas=settings.jetstream_replicas,
        create=settings.backend == "jetstream",
        max_bytes=settings.jetstream_max_bytes,
    )
    store = OutputStore(
        service.engine,
        chunk_bytes=settings.chunk_bytes,
        retention=timedelta(days=settings.retention_days),
        objects=objects,
        backend=settings.backend,
    )
    ttl = timedelta(seconds=settings.upload_ttl_s)
    handlers = Handlers(
        store,
        Uploads(store, ttl=ttl),
        QueryLimits(settings.grep_budget_s, settings.parse_cap_bytes),
    )
    # The grace is the upload lifetime: a chunk an open upload may still count on stays.
    collector = Collector(
        service.engine,
        grace=ttl,
        keep_tombstones=timedelta(days=settings.tombstone_days),
        objects=objects,
    )

    async def on_start() -> None:
        if settings.backend == "jetstream":
            await objects.open()  # a bus without JetStream fails here, not at first write
        await handlers.serve(service.bus)
        gc = collector.run_forever(
            settings.gc_interval_s, orphans_every_s=settings.orphan_sweep_interval_s
        )
        service.background.start("the output collector", gc)

    tokens = TokenStore(
        service.engine,
        operator_token=common.operator_token,
        operator_token_sha256=common.operator_token_sha256,
    )
    return service.app(
        title="Tether output-store",
        on_start=on_start,
        routers=[api.router],
        verifier=tokens,
        state={api.OUTPUT_STORE: store},
    )
