"""The SQLAlchemy 2 async engine (asyncpg), the declarative base, and migrations.

Each service owns its tables and its alembic folder (`<package>/migrations`), with its own
version table, and migrates at start-up under a PostgreSQL advisory lock so replicas that
start together do not race.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import MetaData, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase

from tether_common.errors import StoreError
from tether_common.retrying import DB_MIGRATE, retrying


class Base(DeclarativeBase):
    """Services declare their own `Base` subclasses; this one only fixes conventions."""


def make_engine(url: str, *, pool_size: int = 10, overflow: int | None = None) -> AsyncEngine:
    """An engine keeping up to `pool_size` connections open, and opening up to `overflow`
    more (default: as many) in a burst, each closed again when it is given back."""
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size if overflow is None else overflow,
        # No ping per checkout (a round trip on every step's commit): a connection found
        # dead raises a disconnect error, SQLAlchemy then renews the whole pool.
        pool_pre_ping=False,
        pool_recycle=1800,
    )


def make_sessions(engine: AsyncEngine) -> async_sessionmaker:  # type: ignore[type-arg]
    return async_sessionmaker(engine, expire_on_commit=False)


def _lock_key(version_table: str) -> int:
    return int.from_bytes(hashlib.sha256(version_table.encode()).digest()[:4], "big")


def _upgrade(conn: Connection, script_location: Path, version_table: str) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location))
    cfg.attributes["connection"] = conn
    cfg.attributes["version_table"] = version_table
    # A transaction-level lock: released by the commit or the rollback. A session lock
    # outlived a failed attempt (its unlock cannot run in an aborted transaction), stayed
    # on the pooled connection, and hung every later replica's migration.
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key(version_table)})
    command.upgrade(cfg, "head")


async def migrate(engine: AsyncEngine, script_location: Path, version_table: str) -> None:
    """Bring a service's schema to head, retrying while PostgreSQL is still starting."""
    try:
        async for attempt in retrying(DB_MIGRATE, on=(OSError, DBAPIError)):
            with attempt:
                async with engine.begin() as conn:
                    await conn.run_sync(_upgrade, script_location, version_table)
    except (OSError, DBAPIError) as exc:
        raise StoreError(f"cannot migrate {version_table}: {exc}") from exc


def run_migrations_online(target_metadata: MetaData) -> None:
    """The body of every service's alembic `env.py`: use the connection `migrate` passed."""
    from alembic import context

    conn = context.config.attributes["connection"]
    context.configure(
        connection=conn,
        target_metadata=target_metadata,
        version_table=context.config.attributes["version_table"],
    )
    with context.begin_transaction():
        context.run_migrations()


async def ping(engine: AsyncEngine) -> bool:
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception:
        return False
    return True
