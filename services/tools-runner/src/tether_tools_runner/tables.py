"""The tools-runner's tables: the outcome of each keyed non-idempotent call, and which
revision of which file each run has read (shared by every replica)."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()

effects = Table(
    "tool_effects",
    metadata,
    Column("key", Text, primary_key=True),  # `run_id:call_id`
    Column("run_id", Text, nullable=False, index=True),
    Column("tool", Text, nullable=False),
    # sha256 of the tool name and canonical arguments: a key sent again with another call
    # is refused, never answered with this call's outcome.
    Column("digest", String(64), nullable=False),
    # Raised when an operator's "run it again" takes over a claim left without an outcome;
    # the outcome is written only by the holder of the current attempt.
    Column("attempt", Integer, nullable=False, server_default="1"),
    Column("replica", Text, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # Renewed by the running replica; a lapsed lease with no outcome is in doubt.
    Column("lease_until", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    Column("result", JSONB, nullable=True),  # the ToolResult as answered
    Index("ix_tool_effects_started_at", "started_at"),
)

revisions = Table(
    "file_revisions",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("path", Text, primary_key=True),
    Column("revision", String(80), nullable=False),
    Column("seen_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_file_revisions_seen_at", "seen_at"),
)

# Staged effects (tether_tools_runner.staging, migration 0002): a change set shown on an
# approval card, kept until it is applied or swept, with the bytes it writes.
staged = Table(
    "staged_effects",
    metadata,
    Column("key", Text, primary_key=True),  # `run_id:call_id`, as the effect's key
    Column("digest", String(64), primary_key=True),  # the change set's
    Column("run_id", Text, nullable=False),
    Column("request", String(64), nullable=False),  # the call's tool and arguments
    Column("changes", JSONB, nullable=False),  # the ChangeSet as shown
    Column("staged_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ix_staged_effects_staged_at", "staged_at"),
)

staged_contents = Table(
    "staged_contents",
    metadata,
    Column("key", Text, primary_key=True),
    Column("digest", String(64), primary_key=True),
    Column("path", Text, primary_key=True),
    Column("data", LargeBinary, nullable=False),
    ForeignKeyConstraint(
        ["key", "digest"], ["staged_effects.key", "staged_effects.digest"], ondelete="CASCADE"
    ),
)

# Tool servers of tenants (and shared ones an admin added; migration 0003): the
# credentials sealed under the runner's key, bound to (tenant, server_id).
tool_servers = Table(
    "tool_servers",
    metadata,
    Column("server_id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),  # SHARED_TENANT for a shared server
    Column("name", Text, nullable=False),
    Column("transport", String(10), nullable=False),
    Column("url", Text, nullable=True),
    Column("command", Text, nullable=True),
    Column("args", JSONB, nullable=False, server_default="[]"),
    Column("trusted", Boolean, nullable=False, server_default="false"),
    Column("sealed", LargeBinary, nullable=True),  # None: no credentials
    Column("created_by", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("ux_tool_servers_tenant_name", "tenant", "name", unique=True),
)

__all__ = ["effects", "metadata", "revisions", "staged", "staged_contents", "tool_servers"]
