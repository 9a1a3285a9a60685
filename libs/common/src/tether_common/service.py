"""The life of a service process: connect the bus (retrying while NATS starts), open and
migrate the database, start handlers and background tasks, answer health, readiness and
`/metrics`, and shut down in order: stop taking messages (drain the subscriptions) and
finish the handlers in flight, stop the background tasks, close what they used (the
service's `on_stop`), drain the bus connection, close the database. The event loop's lag
is watched throughout (`looplag`)."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common import identity
from tether_common.background import Background
from tether_common.bus import Bus
from tether_common.db import make_engine, migrate, ping
from tether_common.errors import BusError, ConfigError
from tether_common.http import (
    DEFAULT_BODY_LIMIT,
    BodyLimit,
    health_router,
    install_error_handlers,
    metrics_router,
    serve_http,
)
from tether_common.looplag import LoopLag
from tether_common.placeholders import EX_CONFIG, placeholder_secrets
from tether_common.profiling import profiled
from tether_common.retrying import BUS_CONNECT, retrying
from tether_common.settings import CommonSettings, HttpSettings
from tether_common.subjects import Subjects
from tether_common.telemetry import setup_telemetry

log = logging.getLogger(__name__)

# How long stopping waits for the handlers in flight, then for the bus connection to drain.
SHUTDOWN_WAIT_S = 10.0


def engine_of(settings: CommonSettings) -> AsyncEngine:
    """The service's PostgreSQL engine, pooled as its settings say."""
    return make_engine(
        settings.database_url, pool_size=settings.db_pool_size, overflow=settings.db_pool_overflow
    )


class Service:
    """The shared runtime of one service process; `bus` and `engine` exist once started."""

    def __init__(
        self,
        name: str,
        settings: CommonSettings,
        *,
        migrations: Path | None = None,
        uses_db: bool = True,
    ) -> None:
        self.name = name
        self.settings = settings
        self.subjects = Subjects(
            settings.subject_prefix, stream_replicas=settings.nats_stream_replicas
        )
        self.migrations = migrations
        self.uses_db = uses_db
        self.bus = Bus(self.subjects, name)
        # Sweepers, collectors, senders: started by the service's `on_start`, stopped here.
        self.background = Background(logging.getLogger(f"tether.{name}"))
        # Watches the event loop from the start of `start` to the end of `stop`.
        self.loop_lag = LoopLag(name, settings.loop_lag_warn_s)
        # The engine connects lazily, so domain objects can hold it from construction on.
        self._engine: AsyncEngine | None = engine_of(settings) if uses_db else None

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise ConfigError(f"{self.name}: the database is not open (uses_db={self.uses_db})")
        return self._engine

    async def start(self) -> None:
        self.loop_lag.start()
        await self._connect_bus()
        await self.bus.ensure_streams()
        if self.uses_db:
            self._engine = engine_of(self.settings)
            # Identity first: a service's own migrations may copy rows into its tables.
            await identity.migrate(self._engine)
            if self.migrations is not None:
                await migrate(
                    self._engine, self.migrations, f"alembic_{self.name.replace('-', '_')}"
                )

    async def _connect_bus(self) -> None:
        # The whole message (the URL tried, NATS's reason): what an operator waiting sees.
        async for attempt in retrying(BUS_CONNECT, on=BusError, describe=str):
            with attempt:
                await self.bus.open(
                    self.settings.nats_url,
                    user=self.settings.nats_user,
                    password=self.settings.nats_password,
                )

    async def stop(self, on_stop: Callable[[], Awaitable[None]] | None = None) -> None:
        """Shut down in order; `on_stop` runs once no handler or background task is left
        to use what it closes, while the bus connection and the database are still open
        (handing work back may need both)."""
        await self.bus.stop_taking(SHUTDOWN_WAIT_S)
        await self.background.stop()
        if on_stop is not None:
            await on_stop()
        await self.bus.close(SHUTDOWN_WAIT_S)
        if self._engine is not None:
            await self._engine.dispose()
        await self.loop_lag.stop()

    async def ready(self) -> dict[str, bool]:
        checks = {"nats": self.bus.connected}
        if self.uses_db:
            checks["postgres"] = self._engine is not None and await ping(self._engine)
        return checks

    def app(
        self,
        *,
        title: str,
        on_start: Callable[[], Awaitable[None]],
        on_stop: Callable[[], Awaitable[None]] | None = None,
        routers: Sequence[APIRouter] = (),
        verifier: identity.Verifier | None = None,
        state: Mapping[str, object] | None = None,
    ) -> FastAPI:
        """A FastAPI app whose lifespan starts this service and `on_start`, and stops both.
        Its OpenAPI document is served at `/openapi.json` to a caller with a valid token
        of `verifier` (not at all without one); FastAPI's `/docs` and `/redoc` pages,
        which load their scripts from a CDN, are never served. `state` goes on
        `app.state`, where module-level routes' dependencies find the service's parts."""

        @asynccontextmanager
        async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
            await self.start()
            await on_start()
            log.info("%s ready", self.name)
            try:
                yield
            finally:
                await self.stop(on_stop)
                log.info("%s stopped", self.name)

        app = FastAPI(
            title=title, lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None
        )
        install_error_handlers(app, self.name)
        app.include_router(health_router(self.ready))
        app.include_router(metrics_router())
        for name, part in (state or {}).items():
            setattr(app.state, name, part)
        if verifier is not None:
            app.state.verifier = verifier  # for `identity.http.Caller` on a route
            app.include_router(openapi_router(app, verifier))
        for router in routers:
            app.include_router(router)
        # Every route reads at most DEFAULT_BODY_LIMIT unless it declares `max_body_size`.
        app.add_middleware(BodyLimit, default=DEFAULT_BODY_LIMIT)
        return app


def openapi_router(app: FastAPI, verifier: identity.Verifier) -> APIRouter:
    """`GET /openapi.json` for any valid token (401 without one): the document lists every
    route and body shape, a map an anonymous caller is not given."""
    router = APIRouter()
    who_dep = identity.principal_dependency(verifier)

    @router.get("/openapi.json", include_in_schema=False)
    async def openapi(who: identity.Principal = who_dep) -> dict[str, Any]:
        return app.openapi()

    return router


def run_main(
    name: str,
    settings_cls: type[HttpSettings],
    factory: Callable[[CommonSettings, Any], FastAPI],
    *,
    standard_loop: bool = False,
) -> None:
    """The body of every `python -m tether_<service>`: read settings once, set up
    telemetry, serve until SIGTERM (uvicorn drains through the app's lifespan). A secret
    left at a deploy template's value stops it here, before it reaches the bus.
    `standard_loop`: always the standard library's loop, whatever `event_loop` says."""
    common, settings = CommonSettings(), settings_cls()
    setup_telemetry(name, common)
    if refused := placeholder_secrets(common, settings):
        for problem in refused:
            log.critical(
                "%s refuses to start: %s",
                name,
                problem.message(),
                extra={"code": "placeholder_secret", "setting": problem.setting},
            )
        raise SystemExit(EX_CONFIG)
    with (
        profiled(name, common.profile_dir),
        asyncio.Runner(loop_factory=None if standard_loop else loop_factory(common)) as r,
    ):
        app = factory(common, settings)
        freeze_heap()
        r.run(serve_http(app, settings.http_host, settings.http_port))


def freeze_heap() -> None:
    """Take what importing and wiring the service left on the heap (modules, classes,
    routes: about 157,000 objects in the brain) out of the cyclic garbage collector's
    sight, so each full collection while the service runs walks only what it has made
    since: in the brain about 0.1 s of CPU, a stall of its event loop, before; under 1 ms
    after. Collected first, so no garbage is frozen with it; a frozen object whose last
    reference goes is still freed (only cycles among them would stay)."""
    gc.collect()
    gc.freeze()


def loop_factory(common: CommonSettings) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop the settings choose; the standard one if uvloop is not installed."""
    if common.event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        log.warning("uvloop is not installed: running on the standard asyncio loop")
        return None
    return uvloop.new_event_loop
