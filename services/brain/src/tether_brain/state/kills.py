"""The kill switches in force on this replica: which runs each one covers (`RunScope`),
and the `killed` refusal a start meets while one covers it. What is stored, and how a
replica learns of a change, is `runs.kills.KillSwitch`'s; this module only matches."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from tether_brain.state.run import DEFAULT_AGENT, RunState
from tether_common.errors import ConflictError, ErrorCode
from tether_common.messages.kills import KillScope

KILLED = "killed"  # the stop reason of a run a kill switch ended


@dataclass(frozen=True, slots=True)
class RunScope:
    """What a kill switch matches a run by: the tenant it runs for, and its agent's key
    (agent ids are per tenant; a shared agent's tenant is not the run's)."""

    tenant: str
    agent_tenant: str
    agent: str

    @classmethod
    def of(cls, state: RunState) -> RunScope:
        # A run stored before agents had tenant keys pinned none: its own tenant's.
        return cls(
            tenant=state.tenant,
            agent_tenant=state.options.agent_tenant or state.tenant,
            agent=state.options.agent or DEFAULT_AGENT,
        )


@dataclass(frozen=True, slots=True)
class Kill:
    """One kill switch as stored (`persistence.kills`)."""

    kill_id: int
    scope: KillScope
    tenant: str | None
    agent: str | None
    reason: str | None
    killed_by: str
    killed_at: datetime

    def covers(self, run: RunScope) -> bool:
        match self.scope:
            case "all":
                return True
            case "tenant":
                return run.tenant == self.tenant
            case "agent":
                return (run.agent_tenant, run.agent) == (self.tenant, self.agent)

    @property
    def target(self) -> str:
        """The kill's target in words, and as the CLI names it."""
        match self.scope:
            case "all":
                return "all runs"
            case "tenant":
                return f"the runs of tenant '{self.tenant}'"
            case "agent":
                return f"the runs of agent '{self.agent}' of tenant '{self.tenant}'"

    @property
    def lift_command(self) -> str:
        match self.scope:
            case "all":
                return "tether kill --lift --all"
            case "tenant":
                return f"tether kill --lift --tenant {self.tenant}"
            case "agent":
                return f"tether kill --lift --agent {self.agent} --tenant {self.tenant}"

    def refusal(self) -> ConflictError:
        """The `killed` error a start in scope meets: who killed what, when, and how an
        admin lifts it."""
        why = f" ({self.reason})" if self.reason else ""
        return ConflictError(
            f"{self.target} are killed: stopped by {self.killed_by} at "
            f"{self.killed_at.isoformat(timespec='seconds')}{why}; no run starts until an "
            f"admin lifts it (`{self.lift_command}`, or POST /v1/kill/lift)",
            code=ErrorCode.KILLED,
        )


class Kills:
    """The kills in force as this replica last read them (replaced whole on each read)."""

    def __init__(self) -> None:
        self._active: tuple[Kill, ...] = ()

    def replace(self, kills: Iterable[Kill]) -> None:
        self._active = tuple(kills)

    @property
    def active(self) -> tuple[Kill, ...]:
        return self._active

    def covering(self, run: RunScope) -> Kill | None:
        """The earliest kill in force that covers the run, if any."""
        return next((k for k in self._active if k.covers(run)), None)

    def covers(self, run: RunScope) -> bool:
        return self.covering(run) is not None

    def refuse(self, run: RunScope) -> None:
        """Raise `killed` if a kill in force covers a run of this scope."""
        if (kill := self.covering(run)) is not None:
            raise kill.refusal()
