"""Alembic environment of the identity tables (see tether_common.identity.migrate)."""

from tether_common.db import run_migrations_online
from tether_common.identity.tables import metadata

run_migrations_online(metadata)
