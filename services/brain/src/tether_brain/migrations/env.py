"""Alembic environment of the brain (see tether_common.db.migrate)."""

from tether_brain.persistence.tables import metadata
from tether_common.db import run_migrations_online

run_migrations_online(metadata)
