"""Every NATS subject, stream and queue group, built from one configurable prefix.

Next to each command subject stands its request model, reply model and queue group as
one `Route`, so handlers and typed clients come from the same line. No other module
spells a subject string.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

from tether_common.messages import (
    approvals,
    gateway,
    identity,
    outputs,
    profiles,
    runs,
    staging,
    threads,
    tools,
)

Req = TypeVar("Req", bound=BaseModel)
Rep = TypeVar("Rep", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Route(Generic[Req, Rep]):
    """One request/reply conversation: where it goes, what it carries, who shares it."""

    subject: str
    request: type[Req]
    reply: type[Rep]
    queue: str
    streamed: bool = False  # many replies to one request, ended by a terminal one
    # The responder says "still working" to a watched request (`Bus.request_watched`)
    # before its one answer: several messages to one reply inbox, so whoever serves the
    # route needs a reply allowance of more than one (`natsauth` derives it from this).
    beats: bool = False

    @property
    def replies_many(self) -> bool:
        """Whether one request may get more than one message back."""
        return self.streamed or self.beats


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """A JetStream stream: what must survive a restart or be replayed."""

    name: str
    subjects: tuple[str, ...]
    max_age_s: float
    # Copies kept by a JetStream cluster (1 on a single server; 3 on a 3-node cluster, so
    # losing one node loses no event or decision).
    replicas: int = 1


QUEUE_BRAIN = "brain"
QUEUE_GATEWAY = "gateway"
QUEUE_TOOLS = "tools-runner"
QUEUE_APPROVALS = "approvals"
QUEUE_OUTPUTS = "output-store"
# Answered by every service that holds the identity tables (brain, approvals, output-store).
QUEUE_IDENTITY = "identity"


@dataclass(frozen=True, slots=True)
class Subjects:
    """All subjects under `prefix` (default `tether`)."""

    prefix: str = "tether"
    stream_replicas: int = 1  # TETHER_NATS_STREAM_REPLICAS: see StreamSpec.replicas

    def _s(self, *parts: str) -> str:
        return ".".join((self.prefix, *parts))

    # brain: the client API over NATS
    @property
    def run_start(self) -> Route[runs.StartRun, runs.RunAccepted]:
        return Route(self._s("runs", "start"), runs.StartRun, runs.RunAccepted, QUEUE_BRAIN)

    @property
    def run_get(self) -> Route[runs.GetRun, runs.RunView]:
        return Route(self._s("runs", "get"), runs.GetRun, runs.RunView, QUEUE_BRAIN)

    @property
    def run_list(self) -> Route[runs.ListRuns, runs.RunList]:
        return Route(self._s("runs", "list"), runs.ListRuns, runs.RunList, QUEUE_BRAIN)

    @property
    def run_stop(self) -> Route[runs.StopRun, runs.RunAccepted]:
        return Route(self._s("runs", "stop"), runs.StopRun, runs.RunAccepted, QUEUE_BRAIN)

    @property
    def run_message(self) -> Route[runs.QueueMessage, runs.RunAccepted]:
        return Route(self._s("runs", "message"), runs.QueueMessage, runs.RunAccepted, QUEUE_BRAIN)

    @property
    def run_follow(self) -> Route[runs.FollowRun, runs.RunEventFrame]:
        """Streamed reply: a run's events for a caller who may read the run."""
        return Route(
            self._s("runs", "follow"), runs.FollowRun, runs.RunEventFrame, QUEUE_BRAIN, True
        )

    # brain: threads, conversations as sequences of runs (messages/threads.py)
    @property
    def thread_create(self) -> Route[threads.CreateThread, threads.ThreadView]:
        return Route(
            self._s("threads", "create"), threads.CreateThread, threads.ThreadView, QUEUE_BRAIN
        )

    @property
    def thread_message(self) -> Route[threads.SendThreadMessage, threads.ThreadTurnAccepted]:
        return Route(
            self._s("threads", "message"),
            threads.SendThreadMessage,
            threads.ThreadTurnAccepted,
            QUEUE_BRAIN,
        )

    @property
    def thread_get(self) -> Route[threads.GetThread, threads.ThreadView]:
        return Route(self._s("threads", "get"), threads.GetThread, threads.ThreadView, QUEUE_BRAIN)

    @property
    def thread_list(self) -> Route[threads.ListThreads, threads.ThreadList]:
        return Route(
            self._s("threads", "list"), threads.ListThreads, threads.ThreadList, QUEUE_BRAIN
        )

    @property
    def thread_delete(self) -> Route[threads.DeleteThread, threads.ThreadDeleted]:
        return Route(
            self._s("threads", "delete"), threads.DeleteThread, threads.ThreadDeleted, QUEUE_BRAIN
        )

    @property
    def run_stopping(self) -> str:
        """Broadcast (no queue group): every brain replica hears which run must stop."""
        return self._s("runs", "stopping")

    @property
    def run_child_ended(self) -> str:
        """Broadcast: a sub-agent ended; the replica that claims the parent resumes it."""
        return self._s("runs", "child_ended")

    @property
    def agent_grants_changed(self) -> str:
        """Broadcast: an agent's grants changed; every brain replica reloads them."""
        return self._s("agents", "grants_changed")

    @property
    def kills_changed(self) -> str:
        """Broadcast: a kill switch was set or lifted; every brain replica re-reads them."""
        return self._s("kills", "changed")

    def run_events(self, run_id: str) -> str:
        return self._s("events", run_id)

    @property
    def run_events_all(self) -> str:
        return self._s("events", ">")

    def run_deltas(self, run_id: str) -> str:
        """Core NATS, never a stream: a run's live text (`messages.deltas.RunDelta`)."""
        return self._s("deltas", run_id)

    @property
    def run_deltas_all(self) -> str:
        return self._s("deltas", ">")

    @property
    def run_deltas_ask(self) -> str:
        """Broadcast (`messages.deltas.DeltaAsk`): a reader joined a run's live text late;
        under `deltas.>`, so the brain's delta permission covers it (no run id is `ask`)."""
        return self._s("deltas", "ask")

    # gateway: streamed model generation, one subject per provider
    def generate(self, provider: str) -> Route[gateway.GenerateRequest, gateway.ModelEventMessage]:
        return Route(
            self._s("gateway", "generate", provider),
            gateway.GenerateRequest,
            gateway.ModelEventMessage,
            QUEUE_GATEWAY,
            True,
        )

    @property
    def generate_all(self) -> str:
        return self._s("gateway", "generate", "*")

    # gateway: model profiles (see messages/profiles.py)
    @property
    def model_profile(self) -> Route[profiles.ProfileQuery, profiles.ModelProfile]:
        return Route(
            self._s("gateway", "profiles", "get"),
            profiles.ProfileQuery,
            profiles.ModelProfile,
            QUEUE_GATEWAY,
        )

    @property
    def model_profiles(self) -> Route[profiles.ListProfiles, profiles.ProfileList]:
        return Route(
            self._s("gateway", "profiles", "list"),
            profiles.ListProfiles,
            profiles.ProfileList,
            QUEUE_GATEWAY,
        )

    @property
    def model_profile_put(self) -> Route[profiles.PutProfile, profiles.ModelProfile]:
        return Route(
            self._s("gateway", "profiles", "put"),
            profiles.PutProfile,
            profiles.ModelProfile,
            QUEUE_GATEWAY,
        )

    @property
    def model_probe(self) -> Route[profiles.ProbeModel, profiles.ProbeReport]:
        return Route(
            self._s("gateway", "profiles", "probe"),
            profiles.ProbeModel,
            profiles.ProbeReport,
            QUEUE_GATEWAY,
        )

    # tools-runner
    @property
    def tool_catalog(self) -> Route[tools.CatalogRequest, tools.Catalog]:
        return Route(self._s("tools", "catalog"), tools.CatalogRequest, tools.Catalog, QUEUE_TOOLS)

    @property
    def tool_execute(self) -> Route[tools.ExecuteTool, tools.ToolResult]:
        return Route(
            self._s("tools", "execute"),
            tools.ExecuteTool,
            tools.ToolResult,
            QUEUE_TOOLS,
            beats=True,
        )

    @property
    def tool_stage(self) -> Route[tools.ExecuteTool, staging.StagedEffect]:
        """Run a call against a copy of the workspace; the answer is its change set."""
        return Route(
            self._s("tools", "stage"), tools.ExecuteTool, staging.StagedEffect, QUEUE_TOOLS
        )

    # approvals
    @property
    def approval_create(self) -> Route[approvals.CreateApproval, approvals.ApprovalView]:
        return Route(
            self._s("approvals", "create"),
            approvals.CreateApproval,
            approvals.ApprovalView,
            QUEUE_APPROVALS,
        )

    @property
    def approval_list(self) -> Route[approvals.ListApprovals, approvals.ApprovalList]:
        return Route(
            self._s("approvals", "list"),
            approvals.ListApprovals,
            approvals.ApprovalList,
            QUEUE_APPROVALS,
        )

    @property
    def approval_decide(self) -> Route[approvals.DecideApproval, approvals.ApprovalView]:
        return Route(
            self._s("approvals", "decide"),
            approvals.DecideApproval,
            approvals.ApprovalView,
            QUEUE_APPROVALS,
        )

    @property
    def approval_consume(self) -> Route[approvals.ConsumeApproval, approvals.ConsumeResult]:
        return Route(
            self._s("approvals", "consume"),
            approvals.ConsumeApproval,
            approvals.ConsumeResult,
            QUEUE_APPROVALS,
        )

    @property
    def approval_presence(self) -> Route[approvals.PresenceQuery, approvals.Presence]:
        return Route(
            self._s("approvals", "presence"),
            approvals.PresenceQuery,
            approvals.Presence,
            QUEUE_APPROVALS,
        )

    @property
    def approval_withdraw(self) -> Route[approvals.WithdrawApproval, approvals.ApprovalView]:
        return Route(
            self._s("approvals", "withdraw"),
            approvals.WithdrawApproval,
            approvals.ApprovalView,
            QUEUE_APPROVALS,
        )

    @property
    def approval_watch(self) -> Route[approvals.WatchApprovals, approvals.ApprovalWatch]:
        """An operator's live view through the brain's console: events and presence."""
        return Route(
            self._s("approvals", "watch"),
            approvals.WatchApprovals,
            approvals.ApprovalWatch,
            QUEUE_APPROVALS,
        )

    @property
    def approval_notices(self) -> str:
        """Broadcast (live, no stream): one `ApprovalNotice` per request left for a person
        and per decision, expiry or withdrawal of one, for in-house notifiers. Sent from
        the notice outbox, so at least once: dedupe by `notice_id`."""
        return self._s("approvals", "notices")

    @property
    def approval_decided(self) -> str:
        """JetStream: one `ApprovalDecided` per decision, automated ones and expiries too."""
        return self._s("approvals", "decided")

    # output-store
    @property
    def output_put(self) -> Route[outputs.PutOutput, outputs.OutputStored]:
        return Route(
            self._s("outputs", "put"), outputs.PutOutput, outputs.OutputStored, QUEUE_OUTPUTS
        )

    @property
    def output_get(self) -> Route[outputs.GetOutput, outputs.OutputContent]:
        return Route(
            self._s("outputs", "get"), outputs.GetOutput, outputs.OutputContent, QUEUE_OUTPUTS
        )

    @property
    def output_begin(self) -> Route[outputs.BeginOutput, outputs.UploadStarted]:
        return Route(
            self._s("outputs", "begin"), outputs.BeginOutput, outputs.UploadStarted, QUEUE_OUTPUTS
        )

    @property
    def output_chunk(self) -> Route[outputs.OutputChunk, outputs.ChunkStored]:
        return Route(
            self._s("outputs", "chunk"), outputs.OutputChunk, outputs.ChunkStored, QUEUE_OUTPUTS
        )

    @property
    def output_commit(self) -> Route[outputs.CommitOutput, outputs.OutputStored]:
        return Route(
            self._s("outputs", "commit"), outputs.CommitOutput, outputs.OutputStored, QUEUE_OUTPUTS
        )

    @property
    def output_query(self) -> Route[outputs.QueryOutput, outputs.OutputPage]:
        return Route(
            self._s("outputs", "query"), outputs.QueryOutput, outputs.OutputPage, QUEUE_OUTPUTS
        )

    # identity: a service without the tables has a bearer token verified
    @property
    def identity_verify(self) -> Route[identity.VerifyToken, identity.PrincipalView]:
        return Route(
            self._s("identity", "verify"),
            identity.VerifyToken,
            identity.PrincipalView,
            QUEUE_IDENTITY,
        )

    # JetStream streams, declared once
    @property
    def streams(self) -> tuple[StreamSpec, ...]:
        stream_base = self.prefix.replace(".", "_").upper()
        return (
            StreamSpec(
                f"{stream_base}_RUN_EVENTS",
                (self.run_events_all,),
                max_age_s=7 * 86400,
                replicas=self.stream_replicas,
            ),
            StreamSpec(
                f"{stream_base}_APPROVAL_DECISIONS",
                (self.approval_decided,),
                7 * 86400,
                replicas=self.stream_replicas,
            ),
        )

    @property
    def output_bucket(self) -> str:
        """The JetStream object-store bucket of the output-store's `jetstream` backend."""
        return self.prefix.replace(".", "_").upper() + "_OUTPUTS"

    def routes(self) -> tuple[Route[BaseModel, BaseModel], ...]:
        """Every fixed command route (for contract tests and bus permissions)."""
        found: list[Route[BaseModel, BaseModel]] = [
            self.run_start,  # type: ignore[list-item]
            self.run_get,  # type: ignore[list-item]
            self.run_list,  # type: ignore[list-item]
            self.run_stop,  # type: ignore[list-item]
            self.run_message,  # type: ignore[list-item]
            self.run_follow,  # type: ignore[list-item]
            self.thread_create,  # type: ignore[list-item]
            self.thread_message,  # type: ignore[list-item]
            self.thread_get,  # type: ignore[list-item]
            self.thread_list,  # type: ignore[list-item]
            self.thread_delete,  # type: ignore[list-item]
            self.model_profile,  # type: ignore[list-item]
            self.model_profiles,  # type: ignore[list-item]
            self.model_profile_put,  # type: ignore[list-item]
            self.model_probe,  # type: ignore[list-item]
            self.tool_catalog,  # type: ignore[list-item]
            self.tool_execute,  # type: ignore[list-item]
            self.tool_stage,  # type: ignore[list-item]
            self.approval_create,  # type: ignore[list-item]
            self.approval_list,  # type: ignore[list-item]
            self.approval_decide,  # type: ignore[list-item]
            self.approval_consume,  # type: ignore[list-item]
            self.approval_presence,  # type: ignore[list-item]
            self.approval_withdraw,  # type: ignore[list-item]
            self.approval_watch,  # type: ignore[list-item]
            self.output_put,  # type: ignore[list-item]
            self.output_get,  # type: ignore[list-item]
            self.output_begin,  # type: ignore[list-item]
            self.output_chunk,  # type: ignore[list-item]
            self.output_commit,  # type: ignore[list-item]
            self.output_query,  # type: ignore[list-item]
            self.identity_verify,  # type: ignore[list-item]
        ]
        return tuple(found)
