"""The asyncpg connection under a pooled SQLAlchemy one, for the statements a step runs
(`commits`, `grouped`, the lease renewal): asyncpg keeps each statement prepared per
connection and none of SQLAlchemy's per-execution work is done. A failure there is
reported as SQLAlchemy reports any database failure (callers handle one kind), and a
connection that broke is not given back to the pool."""

from __future__ import annotations

import asyncpg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = ["DRIVER_ERRORS", "database_error", "driver_of"]

# What a statement run straight on the driver may raise.
DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
    TimeoutError,
)


async def driver_of(conn: AsyncConnection) -> asyncpg.Connection:
    """The asyncpg connection of a checked-out pooled connection."""
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert driver is not None  # a pooled connection that is checked out
    return driver


async def database_error(
    conn: AsyncConnection, driver: asyncpg.Connection, sql: str, exc: BaseException
) -> DBAPIError:
    """`exc` as SQLAlchemy's error; the connection invalidated if it broke, or if its
    protocol is out of step ("another operation is in progress" after a kill)."""
    broken = driver.is_closed() or isinstance(exc, asyncpg.InternalClientError)
    if broken:
        await conn.invalidate(exc)
    return DBAPIError(sql, None, exc, connection_invalidated=broken)
