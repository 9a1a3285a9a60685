"""Alembic environment of the output-store (see tether_common.db.migrate)."""

from tether_common.db import run_migrations_online
from tether_output_store.tables import metadata

run_migrations_online(metadata)
