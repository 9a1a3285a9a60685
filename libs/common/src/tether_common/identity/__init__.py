"""One identity model for every service: principals with hashed bearer tokens (created,
listed, revoked, expiring) in PostgreSQL, roles and tenants, and the one permission table.

Owns: `model` (roles, actions, `PERMISSIONS`, `Principal`), `tokens` (the store and the
`Verifier` protocol), `cache` (the short verification cache), `http` (the FastAPI
dependency and the `/v1/tokens` router), `bus` (`identity.verify`, header checks for
NATS handlers), `tables` and `migrations` (version table `alembic_identity`, run by every
service with a database before its own).

Never: stores a plain token, logs one, or decides what a service's resources are; a
service asks `who.require(action, tenant, owner)` about its own rows.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from tether_common.db import migrate as migrate_folder
from tether_common.identity.bus import RemoteVerifier, bearer_headers, bus_principal, serve_verify
from tether_common.identity.cache import TokenCache
from tether_common.identity.http import principal_dependency, tokens_router
from tether_common.identity.model import (
    ACTIONS,
    DEFAULT_TENANT,
    PERMISSIONS,
    ROLES,
    Action,
    Principal,
    Reach,
    Role,
    RowFilter,
)
from tether_common.identity.tokens import (
    TOKENS_TRAIL,
    TokenStore,
    Verifier,
    bearer,
    tokens_head,
)

__all__ = [
    "ACTIONS",
    "DEFAULT_TENANT",
    "MIGRATIONS",
    "PERMISSIONS",
    "ROLES",
    "TOKENS_TRAIL",
    "VERSION_TABLE",
    "Action",
    "Principal",
    "Reach",
    "RemoteVerifier",
    "Role",
    "RowFilter",
    "TokenCache",
    "TokenStore",
    "Verifier",
    "bearer",
    "bearer_headers",
    "bus_principal",
    "migrate",
    "principal_dependency",
    "serve_verify",
    "tokens_head",
    "tokens_router",
]

MIGRATIONS = Path(__file__).parent / "migrations"
VERSION_TABLE = "alembic_identity"


async def migrate(engine: AsyncEngine) -> None:
    """Bring the identity tables to head (under the same advisory lock as any service's
    migrations, keyed by the version table, so replicas of every service may race)."""
    await migrate_folder(engine, MIGRATIONS, VERSION_TABLE)
