"""Databases of the suite's PostgreSQL server: every test module gets one of its own,
cloned from a template that every service's migrations built once per session, so no
module's services meet what another module's left in the database or do to it meanwhile
(one database is one deployment: every service on it sweeps, expires, adopts lapsed runs
and delivers for all of its rows, whatever its subject prefix)."""

from __future__ import annotations

import importlib
import re
import uuid
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from tether_common import identity
from tether_common.db import make_engine, migrate

__all__ = ["migrated_template", "new_database"]

_LABEL = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
# The services that own tables, and the version table each one's `Service.start` uses.
_SERVICES = ("approvals", "brain", "output_store", "tools_runner")


async def new_database(database_url: str, label: str, *, template: str | None = None) -> str:
    """The URL of a fresh database `<label>_<random>` beside `database_url`'s: empty, or a
    copy of `template` (left in place: the session's server and its folder go at the end)."""
    if not _LABEL.fullmatch(label):
        raise ValueError(f"a database label is lower-case letters, digits and _: {label!r}")
    name = f"{label}_{uuid.uuid4().hex[:10]}"
    clone = f' TEMPLATE "{template}"' if template else ""
    admin = make_engine(database_url, pool_size=1)
    try:
        async with admin.connect() as conn:
            auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await auto.execute(text(f'CREATE DATABASE "{name}"{clone}'))
    finally:
        await admin.dispose()
    return make_url(database_url).set(database=name).render_as_string(hide_password=False)


async def migrated_template(server_url: str) -> str:
    """The name of a new database holding every service's schema at head, as each service's
    start would leave it; nothing stays connected to it, so it can be cloned."""
    url = await new_database(server_url, "template")
    engine = make_engine(url, pool_size=1)
    try:
        await identity.migrate(engine)
        for service in _SERVICES:
            package = importlib.import_module(f"tether_{service}")
            folder = Path(str(package.__file__)).parent / "migrations"
            await migrate(engine, folder, f"alembic_{service}")
    finally:
        await engine.dispose()
    return str(make_url(url).database)
