"""Alembic environment of the tools-runner (see tether_common.db.migrate)."""

from tether_common.db import run_migrations_online
from tether_tools_runner.tables import metadata

run_migrations_online(metadata)
