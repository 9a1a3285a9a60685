"""Who may do what: roles, actions, the one permission table, and the `Principal` that
carries a verified caller's role, tenant and limits.

The table is data: for each action, the roles that may take it and how far each reaches
(`all` tenants, its own `tenant`, or only resources it `own`s). A route asks
`who.require("runs.stop", tenant=run.tenant, owner=run.owner)`; a listing asks
`who.reach("runs.read")` for the filter to put in its query.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from tether_common.errors import AuthError, ErrorCode, NotFoundError
from tether_common.messages.identity import DEFAULT_TENANT, ROLES, PrincipalView, Role

__all__ = [
    "ACTIONS",
    "DEFAULT_TENANT",
    "PERMISSIONS",
    "ROLES",
    "Action",
    "Principal",
    "Reach",
    "Role",
    "RowFilter",
]

# How far a role's permission for one action reaches.
Reach = Literal["all", "tenant", "own"]

Action = Literal[
    "runs.start",  # start a run (as itself, in its tenant)
    "runs.read",  # list, get, follow events
    "runs.message",
    "runs.stop",
    "outputs.read",  # outputs follow their runs
    "skills.read",
    "skills.write",
    "agents.read",
    "agents.write",  # agents and their grants, budgets, providers
    "policy.read",  # organisation guardrails, shell allow-list
    "policy.write",
    "approvals.read",
    "approvals.decide",
    "webhooks.manage",
    "audit.read",
    "service.read",  # a service's own operational routes (runner /sandbox, /metrics)
    "tokens.manage",  # create, list, revoke tokens
    "kill.manage",  # set and lift a kill switch (runs of a tenant, an agent, or all)
    "kill.read",  # see the kill switches in force (others': those that apply to its tenant)
    "documents.read",  # list and show documents through the API (all of them, readers or not)
    "documents.write",  # add and remove documents, and say who reads them
    "tool_servers.read",  # its tenant's MCP servers and the shared ones (never credentials)
    "tool_servers.manage",  # add and remove them (stdio and shared ones: admins only)
    "memory.read",  # list and search memories (a user: what is kept about it)
    "memory.write",  # add and forget memories (agent-wide ones: operators only)
    "schedules.read",  # its tenant's schedules (what, when, as whom, what they did last)
    "schedules.manage",  # add, change, pause, resume, remove them (runs run as the writer)
]

_ALL: dict[Role, Reach] = {"admin": "all"}

# THE permission table: action → {role: reach}. A role absent from an action's row may
# not take it at all. `admin` reaches everything in every tenant.
PERMISSIONS: Mapping[Action, Mapping[Role, Reach]] = {
    "runs.start": _ALL | {"operator": "tenant", "owner": "tenant", "client": "tenant"},
    "runs.read": _ALL
    | {
        "operator": "tenant",
        "approver": "tenant",
        "viewer": "tenant",
        "owner": "own",
        "client": "own",
    },
    "runs.message": _ALL | {"operator": "tenant", "owner": "own", "client": "own"},
    "runs.stop": _ALL | {"operator": "tenant", "owner": "own", "client": "own"},
    "outputs.read": _ALL
    | {
        "operator": "tenant",
        "approver": "tenant",
        "viewer": "tenant",
        "owner": "own",
        "client": "own",
    },
    "skills.read": _ALL | {"operator": "tenant", "owner": "tenant"},
    "skills.write": _ALL | {"operator": "tenant"},
    "agents.read": _ALL
    | {"operator": "tenant", "approver": "tenant", "viewer": "tenant", "owner": "own"},
    "agents.write": _ALL | {"operator": "tenant", "owner": "own"},
    "policy.read": _ALL | {"operator": "tenant"},
    "policy.write": _ALL | {"operator": "tenant"},
    "approvals.read": _ALL
    | {"operator": "tenant", "approver": "tenant", "viewer": "tenant", "owner": "own"},
    "approvals.decide": _ALL | {"operator": "tenant", "approver": "tenant"},
    "webhooks.manage": _ALL | {"operator": "tenant"},
    "audit.read": _ALL,
    "service.read": _ALL | {"operator": "tenant"},
    "tokens.manage": _ALL,
    "kill.manage": _ALL,
    # Whoever works in a tenant may see why its runs are refused (the refusal says so too).
    "kill.read": _ALL | {"operator": "tenant", "approver": "tenant", "viewer": "tenant"},
    # Managing documents; retrieving them is `search_documents`, as each document's readers say.
    "documents.read": _ALL | {"operator": "tenant"},
    "documents.write": _ALL | {"operator": "tenant"},
    "tool_servers.read": _ALL | {"operator": "tenant", "viewer": "tenant"},
    "tool_servers.manage": _ALL | {"operator": "tenant"},
    # What runs remember (`memory_save`): each user sees and forgets what is kept about
    # it; the tenant's operators all of the tenant's.
    "memory.read": _ALL | {"operator": "tenant", "owner": "own", "client": "own"},
    "memory.write": _ALL | {"operator": "tenant", "owner": "own", "client": "own"},
    "schedules.read": _ALL | {"operator": "tenant", "approver": "tenant", "viewer": "tenant"},
    "schedules.manage": _ALL | {"operator": "tenant"},
}
ACTIONS: tuple[Action, ...] = tuple(PERMISSIONS)


@dataclass(frozen=True, slots=True)
class RowFilter:
    """What a listing must filter on for one principal and action: None is no filter.
    `owner` admits rows the principal started and rows of agents it owns."""

    tenant: str | None
    owner: str | None


def _names(raw: Iterable[str] | None) -> frozenset[str] | None:
    return None if raw is None else frozenset(raw)


def _listed(names: frozenset[str] | None) -> list[str] | None:
    return None if names is None else sorted(names)


@dataclass(frozen=True, slots=True)
class Principal:
    """A verified caller. `name` is its identity within `tenant` (a run's owner, the
    `decided_by` of a decision); the limits say what it may use (None: no limit beyond
    its tenant's). `agents`/`owners` are also the approvals team scope."""

    name: str
    role: Role
    tenant: str = DEFAULT_TENANT
    token_id: str | None = None
    agents: frozenset[str] | None = None
    owners: frozenset[str] | None = None
    providers: frozenset[str] | None = None
    models: frozenset[str] | None = None
    modes: frozenset[str] | None = None
    expires_at: datetime | None = None
    # The approver groups (teams) it belongs to; a quorum may require one.
    groups: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        """How audit records and `decided_by` name it: `operator` for the bootstrap
        admin, `token:<name>` for a token's principal."""
        return self.name if self.token_id is None else f"token:{self.name}"

    # ---- the permission table ----------------------------------------------------

    def reach_of(self, action: Action) -> Reach | None:
        """How far this principal's role reaches for `action` (None: not at all)."""
        return PERMISSIONS[action].get(self.role)

    def may(self, action: Action) -> bool:
        """Whether the role may take `action` on anything at all."""
        return self.reach_of(action) is not None

    def sees(
        self,
        action: Action,
        tenant: str,
        owner: str | None = None,
        *,
        agent_owner: str | None = None,
    ) -> bool:
        """Whether `action` reaches a resource of `tenant` started by `owner` (whose
        agent `agent_owner` owns). False for a role that may not take `action`."""
        match self.reach_of(action):
            case "all":
                return True
            case "tenant":
                return tenant == self.tenant
            case "own":
                mine = self.name in (owner, agent_owner)
                return tenant == self.tenant and mine
            case None:
                return False

    def require(
        self,
        action: Action,
        tenant: str | None = None,
        owner: str | None = None,
        *,
        agent_owner: str | None = None,
    ) -> None:
        """Raise 403 `forbidden` unless the role may take `action`; given a resource's
        `tenant`, raise 404 `not_found` unless it is within reach, so another tenant's
        resource looks exactly like one that does not exist."""
        if not self.may(action):
            raise AuthError(f"the role '{self.role}' may not {action}", code=ErrorCode.FORBIDDEN)
        if tenant is not None and not self.sees(action, tenant, owner, agent_owner=agent_owner):
            raise NotFoundError("no such resource")

    def reach(self, action: Action) -> RowFilter:
        """The filter a listing applies for `action` (403 if the role may not list)."""
        self.require(action)
        match self.reach_of(action):
            case "all":
                return RowFilter(None, None)
            case "tenant":
                return RowFilter(self.tenant, None)
            case _:
                return RowFilter(self.tenant, self.name)

    # ---- limits: what it may use -------------------------------------------------

    def covers(self, agent: str | None, owner: str | None) -> bool:
        """The approvals team scope: every limit admits this request's agent and owner."""
        if self.agents is not None and agent not in self.agents:
            return False
        return self.owners is None or owner in self.owners

    def check_use(
        self,
        *,
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        mode: str | None = None,
    ) -> None:
        """Raise 403 `forbidden` naming the first choice this principal's limits do not
        admit (a None argument is not checked; a None limit admits everything)."""
        for kind, value, allowed in (
            ("agent", agent, self.agents),
            ("provider", provider, self.providers),
            ("model", model, self.models),
            ("mode", mode, self.modes),
        ):
            if value is not None and allowed is not None and value not in allowed:
                raise AuthError(
                    f"this token may not use the {kind} '{value}'", code=ErrorCode.FORBIDDEN
                )

    # ---- on the wire ---------------------------------------------------------------

    def view(self) -> PrincipalView:
        return PrincipalView(
            name=self.name,
            role=self.role,
            tenant=self.tenant,
            token_id=self.token_id,
            agents=_listed(self.agents),
            owners=_listed(self.owners),
            providers=_listed(self.providers),
            models=_listed(self.models),
            modes=_listed(self.modes),
            groups=_listed(self.groups) or None,
            expires_at=self.expires_at,
        )

    @classmethod
    def of(cls, view: PrincipalView) -> Principal:
        return cls(
            name=view.name,
            role=view.role,
            tenant=view.tenant,
            token_id=view.token_id,
            agents=_names(view.agents),
            owners=_names(view.owners),
            providers=_names(view.providers),
            models=_names(view.models),
            modes=_names(view.modes),
            groups=_names(view.groups) or frozenset(),
            expires_at=view.expires_at,
        )


assert set(ROLES) >= {role for row in PERMISSIONS.values() for role in row}
