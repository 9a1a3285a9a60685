"""Every NATS subject, stream and queue group, built from one configurable prefix.

Next to each command subject stands its request model, reply model and queue group as
one `Route`, so handlers and typed clients come from the same line: the routes are a
table in `Subjects`, one `route(...)` line each, and `Subjects.routes()` reads the table.
No other module spells a subject string. Each NATS user's inbox prefix is here too
(`inbox_prefix`), for the bus and the generated server configuration alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel

from tether_common.messages import (
    approvals,
    gateway,
    hooks,
    identity,
    outputs,
    profiles,
    runs,
    staging,
    threads,
    tool_servers,
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
    # A caller that goes away (its task cancelled, its stream closed early) says so on
    # `Subjects.cancel_notices(queue)`, and the serving process cancels the handler: only
    # for a route whose handler is safe to cut short (a model generation, not a tool call
    # whose effect may be half made). `natsauth` lets its callers publish the notice.
    cancellable: bool = False

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


class RouteField(Generic[Req, Rep]):
    """One line of the routes table in `Subjects`: the subject below the prefix and the
    rest of its `Route`, read on an instance as that `Route`."""

    __slots__ = ("beats", "cancellable", "path", "queue", "reply", "request", "streamed")

    def __init__(
        self,
        path: str,
        request: type[Req],
        reply: type[Rep],
        queue: str,
        *,
        streamed: bool = False,
        beats: bool = False,
        cancellable: bool = False,
    ) -> None:
        self.path, self.request, self.reply, self.queue = path, request, reply, queue
        self.streamed, self.beats, self.cancellable = streamed, beats, cancellable

    @overload
    def __get__(self, subjects: None, owner: type[Any]) -> RouteField[Req, Rep]: ...
    @overload
    def __get__(self, subjects: Subjects, owner: type[Any]) -> Route[Req, Rep]: ...
    def __get__(
        self, subjects: Subjects | None, owner: type[Any]
    ) -> Route[Req, Rep] | RouteField[Req, Rep]:
        if subjects is None:
            return self
        subject = f"{subjects.prefix}.{self.path}"
        return Route(
            subject,
            self.request,
            self.reply,
            self.queue,
            self.streamed,
            self.beats,
            self.cancellable,
        )


route = RouteField  # the table's spelling: `run_start = route(...)`


def inbox_prefix(user: str) -> str:
    """A NATS user's own inbox prefix: it may subscribe below it and nowhere else (the
    locked-down bus's configuration and `Bus.open` both take it from here)."""
    return f"_INBOX_{user}"


QUEUE_BRAIN = "brain"
QUEUE_GATEWAY = "gateway"
QUEUE_TOOLS = "tools-runner"
QUEUE_APPROVALS = "approvals"
QUEUE_OUTPUTS = "output-store"
# Answered by every service that holds the identity tables (brain, approvals, output-store).
QUEUE_IDENTITY = "identity"
# Answered by an operator's hook services (the bus user `hooks`), called by the brain.
QUEUE_HOOKS = "hooks"


@dataclass(frozen=True, slots=True)
class Subjects:
    """All subjects under `prefix` (default `tether`)."""

    prefix: str = "tether"
    stream_replicas: int = 1  # TETHER_NATS_STREAM_REPLICAS: see StreamSpec.replicas

    def _s(self, *parts: str) -> str:
        return ".".join((self.prefix, *parts))

    # brain: the client API over NATS
    run_start = route("runs.start", runs.StartRun, runs.RunAccepted, QUEUE_BRAIN)
    run_get = route("runs.get", runs.GetRun, runs.RunView, QUEUE_BRAIN)
    run_list = route("runs.list", runs.ListRuns, runs.RunList, QUEUE_BRAIN)
    run_stop = route("runs.stop", runs.StopRun, runs.RunAccepted, QUEUE_BRAIN)
    run_message = route("runs.message", runs.QueueMessage, runs.RunAccepted, QUEUE_BRAIN)
    # Streamed reply: a run's events for a caller who may read the run.
    run_follow = route(
        "runs.follow", runs.FollowRun, runs.RunEventFrame, QUEUE_BRAIN, streamed=True
    )
    # brain: threads, conversations as sequences of runs (messages/threads.py)
    thread_create = route("threads.create", threads.CreateThread, threads.ThreadView, QUEUE_BRAIN)
    thread_message = route(
        "threads.message", threads.SendThreadMessage, threads.ThreadTurnAccepted, QUEUE_BRAIN
    )
    thread_get = route("threads.get", threads.GetThread, threads.ThreadView, QUEUE_BRAIN)
    thread_list = route("threads.list", threads.ListThreads, threads.ThreadList, QUEUE_BRAIN)
    thread_delete = route(
        "threads.delete", threads.DeleteThread, threads.ThreadDeleted, QUEUE_BRAIN
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

    @property
    def tool_servers_changed(self) -> str:
        """Broadcast: a tool server was added or removed; every runner replica re-reads."""
        return self._s("tools", "servers_changed")

    def run_events(self, run_id: str) -> str:
        return self._s("events", run_id)

    @property
    def run_events_all(self) -> str:
        return self._s("events", ">")

    def run_notable(self, run_id: str) -> str:
        """A second copy of a run event that makes a run notice (`notice_kind` in
        `messages.webhooks`), in the same stream but out of `run_events(run_id)`'s sight:
        the approvals service's consumer has the server filter the run events for it (it
        decoded and acknowledged every event of every step before)."""
        return self._s("events", run_id, "notable")

    @property
    def run_notable_all(self) -> str:
        return self._s("events", "*", "notable")

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
            streamed=True,
            cancellable=True,  # a generation nobody reads only spends the provider's tokens
        )

    @property
    def generate_all(self) -> str:
        return self._s("gateway", "generate", "*")

    def cancel_notices(self, queue: str) -> str:
        """Broadcast (`messages.cancel.CancelNotice`): a caller of a cancellable route of
        queue group `queue` went away; the replica handling its request cancels it."""
        return self._s(queue, "cancel")

    # hooks: a tenant's hook of transport `nats` names a service answered here
    def hook(self, service: str) -> Route[hooks.HookRequest, hooks.HookReply]:
        return Route(self._s("hooks", service), hooks.HookRequest, hooks.HookReply, QUEUE_HOOKS)

    @property
    def hooks_all(self) -> str:
        return self._s("hooks", "*")

    # gateway: model profiles (see messages/profiles.py)
    model_profile = route(
        "gateway.profiles.get", profiles.ProfileQuery, profiles.ModelProfile, QUEUE_GATEWAY
    )
    model_profiles = route(
        "gateway.profiles.list", profiles.ListProfiles, profiles.ProfileList, QUEUE_GATEWAY
    )
    model_profile_put = route(
        "gateway.profiles.put", profiles.PutProfile, profiles.ModelProfile, QUEUE_GATEWAY
    )
    model_probe = route(
        "gateway.profiles.probe", profiles.ProbeModel, profiles.ProbeReport, QUEUE_GATEWAY
    )
    # tools-runner
    tool_catalog = route("tools.catalog", tools.CatalogRequest, tools.Catalog, QUEUE_TOOLS)
    tool_execute = route(
        "tools.execute", tools.ExecuteTool, tools.ToolResult, QUEUE_TOOLS, beats=True
    )
    # Run a call against a copy of the workspace; the answer is its change set.
    tool_stage = route("tools.stage", tools.ExecuteTool, staging.StagedEffect, QUEUE_TOOLS)
    # Tool servers (a tenant resource): the brain forwards `/v1/tool-servers` here; the
    # runner owns the rows and the key that seals their credentials.
    tool_server_add = route(
        "tools.servers.add", tool_servers.AddToolServer, tool_servers.ToolServerView, QUEUE_TOOLS
    )
    tool_server_list = route(
        "tools.servers.list",
        tool_servers.ListToolServers,
        tool_servers.ToolServerList,
        QUEUE_TOOLS,
    )
    tool_server_remove = route(
        "tools.servers.remove",
        tool_servers.RemoveToolServer,
        tool_servers.ToolServerRemoved,
        QUEUE_TOOLS,
    )
    # approvals
    approval_create = route(
        "approvals.create", approvals.CreateApproval, approvals.ApprovalView, QUEUE_APPROVALS
    )
    approval_list = route(
        "approvals.list", approvals.ListApprovals, approvals.ApprovalList, QUEUE_APPROVALS
    )
    approval_decide = route(
        "approvals.decide", approvals.DecideApproval, approvals.ApprovalView, QUEUE_APPROVALS
    )
    approval_consume = route(
        "approvals.consume", approvals.ConsumeApproval, approvals.ConsumeResult, QUEUE_APPROVALS
    )
    approval_presence = route(
        "approvals.presence", approvals.PresenceQuery, approvals.Presence, QUEUE_APPROVALS
    )
    approval_withdraw = route(
        "approvals.withdraw", approvals.WithdrawApproval, approvals.ApprovalView, QUEUE_APPROVALS
    )
    # An operator's live view through the brain's console: events and presence.
    approval_watch = route(
        "approvals.watch", approvals.WatchApprovals, approvals.ApprovalWatch, QUEUE_APPROVALS
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
    output_put = route("outputs.put", outputs.PutOutput, outputs.OutputStored, QUEUE_OUTPUTS)
    output_get = route("outputs.get", outputs.GetOutput, outputs.OutputContent, QUEUE_OUTPUTS)
    output_begin = route("outputs.begin", outputs.BeginOutput, outputs.UploadStarted, QUEUE_OUTPUTS)
    output_chunk = route("outputs.chunk", outputs.OutputChunk, outputs.ChunkStored, QUEUE_OUTPUTS)
    output_commit = route(
        "outputs.commit", outputs.CommitOutput, outputs.OutputStored, QUEUE_OUTPUTS
    )
    output_query = route("outputs.query", outputs.QueryOutput, outputs.OutputPage, QUEUE_OUTPUTS)
    # identity: a service without the tables has a bearer token verified
    identity_verify = route(
        "identity.verify", identity.VerifyToken, identity.PrincipalView, QUEUE_IDENTITY
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
        """Every fixed command route, in declaration order (for contract tests and bus
        permissions)."""
        table = vars(type(self)).items()
        return tuple(getattr(self, name) for name, value in table if isinstance(value, RouteField))
