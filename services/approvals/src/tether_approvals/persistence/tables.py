"""The approvals service's tables (the audit trail's table lives in `tether_common.audit`)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Identity,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()

approvals = Table(
    "approvals",
    metadata,
    Column("approval_id", String(40), primary_key=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("step", Integer, nullable=False),
    Column("tool", String(200), nullable=False),
    Column("args", JSONB, nullable=False),
    Column("danger", String(40), nullable=False),
    Column("reason", Text, nullable=False),
    Column("reach", String(20), nullable=False),
    Column("action_digest", String(64), nullable=False),
    Column("status", String(20), nullable=False, index=True),
    Column("decision", String(20)),
    Column("note", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("decided_at", DateTime(timezone=True)),
    Column("agent", String(200)),
    Column("owner", String(200)),
    Column("scope", String(40)),
    Column("effect", String(40)),
    Column("decided_by", String(200)),
    Column("consumed_at", DateTime(timezone=True)),
    # Outbox mark: set once the decision is on JetStream; the sweeper re-sends the rest.
    Column("published_at", DateTime(timezone=True)),
    # The decision's HMAC by this service (tether_common.decisions); the key is not here.
    Column("proof", String(80)),
    Column("tenant", String(200), nullable=False, server_default="default"),
    # Two keys (tether_approvals.decisions.quorum, migration 0006): the principal that started the
    # run, how many people must allow, the group that may decide now, the votes so far
    # (`ApprovalView.approvals`), and the move to a second group.
    Column("requested_by", String(200)),
    Column("needed", Integer, nullable=False, server_default="1"),
    Column("group", String(200)),
    Column("votes", JSONB, nullable=False, server_default="[]"),
    Column("escalate_to", String(200)),
    Column("escalate_at", DateTime(timezone=True)),
    Column("escalated_at", DateTime(timezone=True)),
    # A staged effect's change set (`messages.staging.ChangeSet`, migration 0007): what
    # approving applies, shown on the card; None for a call approved the old way.
    Column("changes", JSONB),
    # An operator's edit (the new arguments) or response (the model's text), migration
    # 0008; `arguments_schema`: the tool's schema an edit is checked against.
    Column("edited_args", JSONB),
    Column("response", Text),
    Column("arguments_schema", JSONB),
)

# The operator event stream, in order; its id is the SSE event id (resumable).
approval_events = Table(
    "approval_events",
    metadata,
    Column("event_id", BigInteger, Identity(), primary_key=True),
    Column("approval_id", String(40), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("approval", JSONB, nullable=False),
    Column("ts", DateTime(timezone=True), nullable=False, index=True),
)

# Live operator event streams, refreshed by heartbeat, so presence is shared by replicas.
operator_sessions = Table(
    "operator_sessions",
    metadata,
    Column("session_id", String(40), primary_key=True),
    Column("principal", String(200), nullable=False),
    Column("role", String(20), nullable=False),
    Column("agents", JSONB),
    Column("owners", JSONB),
    Column("seen_at", DateTime(timezone=True), nullable=False, index=True),
)

# The head digest of each audit trail this service writes (`approvals:<run_id>`,
# `_tokens`), so a trail cut after its last record is found by `audit.verify`.
audit_heads = Table(
    "audit_heads",
    metadata,
    Column("trail", String(200), primary_key=True),
    Column("head", String(64), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Where a tenant's notices go (tether_approvals.notices.webhooks). `secret` is kept as given: it
# signs every delivery, so it cannot be stored as a hash; no route returns it again.
webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("endpoint_id", String(40), primary_key=True),
    Column("tenant", String(200), nullable=False, index=True),
    Column("url", Text, nullable=False),
    Column("secret", Text, nullable=False),
    Column("events", JSONB, nullable=False),
    # The creator's team scope (None: all): an endpoint never hears more than its creator.
    Column("agents", JSONB),
    Column("owners", JSONB),
    Column("description", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("created_by", String(200), nullable=False),
)

# The notice outbox (tether_approvals.notices.outbox): one row per webhook delivery or NATS notice,
# inserted in the transaction of the change it announces; `pending` → `delivered` | `dead`.
notice_outbox = Table(
    "notice_outbox",
    metadata,
    Column("delivery_id", String(40), primary_key=True),
    Column("notice_id", String(40), nullable=False),
    Column(
        "endpoint_id",
        String(40),
        ForeignKey("webhook_endpoints.endpoint_id", ondelete="CASCADE"),
        index=True,
    ),
    Column("sink", String(10), nullable=False),  # webhook | nats
    # A NATS notice's subject, fixed when written (the writer's prefix, not the sender's).
    Column("subject", String(200)),
    Column("tenant", String(200), nullable=False),
    Column("kind", String(40), nullable=False),
    # A run notice (migration 0008) names its run, and its approval only for a park.
    Column("approval_id", String(40)),
    Column("run_id", String(64)),
    # The exact bytes sent (and signed) on every attempt.
    Column("body", Text, nullable=False),
    Column("status", String(20), nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_attempt_at", DateTime(timezone=True), nullable=False),
    # Retries stop here (or after the configured attempts); a manual re-send moves it.
    Column("give_up_at", DateTime(timezone=True), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("last_attempt_at", DateTime(timezone=True)),
    Column("delivered_at", DateTime(timezone=True)),
    Column("last_error", Text),
)
