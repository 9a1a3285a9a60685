"""A database of a test module's own on the session's PostgreSQL server: for tests whose
assertions must not meet what other modules' services leave in the shared database or do
to it meanwhile (one database is one deployment: every service on it sweeps, expires and
delivers for all of its rows, whatever its subject prefix)."""

from __future__ import annotations

import re
import uuid

from sqlalchemy import text
from sqlalchemy.engine import make_url

from tether_common.db import make_engine

__all__ = ["new_database"]

_LABEL = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


async def new_database(database_url: str, label: str) -> str:
    """The URL of a fresh, empty database `<label>_<random>` beside `database_url`'s (left
    in place: the session's server and its folder go at the end)."""
    if not _LABEL.fullmatch(label):
        raise ValueError(f"a database label is lower-case letters, digits and _: {label!r}")
    name = f"{label}_{uuid.uuid4().hex[:10]}"
    admin = make_engine(database_url, pool_size=1)
    try:
        async with admin.connect() as conn:
            auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await auto.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        await admin.dispose()
    return make_url(database_url).set(database=name).render_as_string(hide_password=False)
