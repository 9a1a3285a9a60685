"""Alembic environment of the approvals service (see tether_common.db.migrate)."""

from tether_approvals.persistence.tables import metadata
from tether_common.db import run_migrations_online

run_migrations_online(metadata)
