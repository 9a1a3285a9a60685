"""The brain's view of the tools: the catalogue (cached from the tools-runner), the
validation gate, and sending an allowed call to the runner. Failures are results."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jsonschema import Draft202012Validator

from tether_brain.clients.runner import RunnerPort
from tether_brain.context.memo import IdentityMemo
from tether_brain.context.offering import DEFAULT_KEYWORDS, choose
from tether_brain.state.options import RunOptions
from tether_brain.tools.helpers import MAX_DEPTH, RUN_AGENT
from tether_brain.tools.local import LocalTool
from tether_brain.tools.tenant_tools import Overlay, TenantTools, current_tenant
from tether_common.errors import BusTimeoutError, ErrorCode, TetherError
from tether_common.messages.gateway import CallRecord, OfferedToolSpec
from tether_common.messages.tools import (
    TOOL_NOT_READY,
    Catalog,
    ExecuteTool,
    ToolDescriptor,
    ToolResult,
    effect_key,
    mcp_server_of,
)
from tether_common.retrying import Policy, retrying


def _specs(tools: Sequence[ToolDescriptor]) -> list[OfferedToolSpec]:
    return list(map(_spec, tools))


# The spec of each descriptor, made once: a step offers the same objects as the last (the
# catalogue's descriptors are replaced, never changed, when it is reloaded).
_spec: IdentityMemo[ToolDescriptor, OfferedToolSpec] = IdentityMemo(
    lambda t: OfferedToolSpec(name=t.name, description=t.description, parameters=t.parameters)
)


def switched_off(tool: ToolDescriptor, options: RunOptions) -> str | None:
    """The request's switches: `false` wins over any other flag."""
    if options.guide_only:
        return "this run is guide-only: no tool runs."
    allowed = options.allowed_tools
    if allowed is not None and tool.name not in allowed:
        return f"{tool.name} is not among this helper's tools."
    if tool.name == RUN_AGENT and options.depth >= MAX_DEPTH:
        return f"helpers at depth {MAX_DEPTH} cannot start helpers."
    if options.allow_shell is False and tool.effect == "process":
        return f"{tool.name} runs commands, and this run has allow_shell=false."
    if options.allow_web is False and tool.effect == "network":
        return f"{tool.name} reaches the network, and this run has allow_web=false."
    return None


log = logging.getLogger(__name__)

RUNNER_LOST = "runner_lost"  # no reply from the runner: the call's outcome is unknown
NO_RUNNER = "no_runner"  # no runner listened: the call was never delivered, so never run
# Reading the runner's catalogue: a read, so a few quick tries.
CATALOG_READ = Policy("reading the tool catalogue", 0.2, 0.4, jitter=False, attempts=3)


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """What the gates decided for one call; a refusal is read by the model, never raised."""

    allowed: bool
    code: str | None = None
    message: str = ""
    tool: ToolDescriptor | None = None


class Toolbox:
    def __init__(
        self,
        runner: RunnerPort,
        *,
        ttl_s: float,
        timeout_s: float,
        local: Sequence[LocalTool] = (),
        keywords: Mapping[str, Sequence[str]] | None = None,
        heartbeat_s: float | None = None,
    ) -> None:
        # The runner beats this often while a call runs; three missed beats mean it died
        # (the call is lost, as at the timeout, only sooner). None: wait for the timeout.
        self.heartbeat_s = heartbeat_s
        self.keywords = dict(DEFAULT_KEYWORDS if keywords is None else keywords)
        self.local = {tool.name: tool for tool in local}
        self.runner = runner
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self._tools: dict[str, ToolDescriptor] = {}
        self._aliases: dict[str, str] = {}
        self._validators: dict[str, Draft202012Validator] = {}
        self._fetched_at = float("-inf")
        # MCP servers the runner named as still connecting at the last refresh.
        self._connecting: frozenset[str] = frozenset()
        # The current run's tenant's own servers' tools, over the shared ones (a shared
        # name wins, as on the runner).
        self.tenants = TenantTools(runner, ttl_s=ttl_s)

    async def catalog(self, *, fresh: bool = False) -> list[ToolDescriptor]:
        """The catalogue, refreshed every `ttl_s` (or now, `fresh`); a failed refresh
        keeps the last one (a read, retried a few times; with nothing known yet it raises).
        A tool of an MCP server still connecting stays known (`_kept`)."""
        if fresh or time.monotonic() - self._fetched_at > self.ttl_s:
            try:
                reply = await self._fetch()
            except TetherError:
                if not self._fetched_at > float("-inf"):
                    raise
                log.warning("tool catalogue refresh failed; keeping the last one")
                self._fetched_at = time.monotonic() - self.ttl_s / 2
                return list(self._tools.values())
            self._connecting = frozenset(reply.connecting)
            self._tools = self._kept(reply)
            self._aliases = {a: t.name for t in reply.tools for a in t.aliases}
            self._validators = {
                n: Draft202012Validator(t.parameters) for n, t in self._tools.items()
            }
            self._fetched_at = time.monotonic()
        self._add_local()
        tenant = current_tenant.get()
        if tenant is not None:
            await self.tenants.refresh(tenant, fresh=fresh)
        return [*self._tools.values(), *self._own().tools.values()]

    def _own(self) -> Overlay:
        """The current run's tenant's own tools as last read (none outside a run)."""
        return self.tenants.of(current_tenant.get())

    def _lookup(self, name: str) -> tuple[ToolDescriptor, Draft202012Validator] | None:
        """A tool by its name (no alias) and its validator: shared first, then own."""
        if (tool := self._tools.get(name)) is not None:
            return tool, self._validators[name]
        own = self._own()
        if (tool := own.tools.get(name)) is not None:
            return tool, own.validators[name]
        return None

    async def _fetch(self) -> Catalog:
        async for attempt in retrying(CATALOG_READ, on=TetherError):
            with attempt:
                return await self.runner.catalog()
        raise AssertionError("unreachable: the last failure is raised")

    def _kept(self, reply: Catalog) -> dict[str, ToolDescriptor]:
        """The available tools, and those of a server still connecting: listed by the
        runner as unavailable, or not listed at all (a restarted runner whose server has
        not connected yet) but known from the last catalogue. A call of one waits for
        its server (the runner answers `tool_not_ready`) instead of being refused as
        unknown mid-run; the gates judge it on its known descriptor first."""
        kept = {
            t.name: t
            for t in reply.tools
            if t.available or mcp_server_of(t.name) in self._connecting
        }
        for name, known in self._tools.items():
            if name not in kept and mcp_server_of(name) in self._connecting:
                kept[name] = known.model_copy(update={"available": False})
        return kept

    def loading(self, name: str, options: RunOptions) -> str | None:
        """The MCP server still connecting that `name` belongs to, when no descriptor of
        it is known yet and this run could call it by name (its switches are read first:
        a wait never serves a call the run could not make). None otherwise."""
        name = self._aliases.get(name, name)
        server = mcp_server_of(name)
        own = self._own()
        connecting = self._connecting | own.connecting
        if self._lookup(name) is not None or server not in connecting or options.guide_only:
            return None
        allowed = options.allowed_tools
        return server if allowed is None or name in allowed else None

    def _add_local(self) -> None:
        for name, tool in self.local.items():
            descriptor = tool.descriptor()
            if descriptor is None:
                self._tools.pop(name, None)
            elif self._tools.get(name) != descriptor:
                self._tools[name] = descriptor
                self._validators[name] = Draft202012Validator(descriptor.parameters)

    async def offered(self, options: RunOptions) -> list[OfferedToolSpec]:
        """Every tool this run may use (for sub-agents' tool lists and explanations)."""
        return _specs([t for t in await self.catalog() if switched_off(t, options) is None])

    async def offer(
        self, options: RunOptions, recent: str
    ) -> tuple[list[OfferedToolSpec], str | None]:
        """What one step offers the model: connector tools narrowed to the services the
        recent text points at, and a note naming the others."""
        usable = [t for t in await self.catalog() if switched_off(t, options) is None]
        offer = choose(usable, recent, self.keywords)
        return _specs(offer.tools), offer.note()

    def descriptor(self, name: str) -> ToolDescriptor | None:
        found = self._lookup(self._aliases.get(name, name))
        return found[0] if found is not None else None

    def names(self) -> list[str]:
        return sorted({*self._tools, *self._own().tools})

    def validate(self, call: CallRecord, options: RunOptions) -> GateOutcome:
        """Gate 1: the tool exists (aliases applied), the request's switches allow it, and
        the arguments match its schema."""
        name = self._aliases.get(call.name, call.name)
        found = self._lookup(name)
        tool = found[0] if found is not None else None
        if tool is None and (server := self.loading(name, options)) is not None:
            return GateOutcome(
                False,
                TOOL_NOT_READY,
                f"not run: {name} is not loaded yet (its MCP server '{server}' is still "
                "connecting). Tell the user it is unavailable for now.",
            )
        if found is None or tool is None:
            valid = ", ".join(self.names())
            return GateOutcome(
                False, "unknown_tool", f"no tool '{call.name}'. Valid tools: {valid}."
            )
        if (reason := switched_off(tool, options)) is not None:
            return GateOutcome(False, "switched_off", reason)
        errors = sorted(found[1].iter_errors(call.arguments), key=str)
        if errors:
            detail = "; ".join(e.message for e in errors[:3])
            return GateOutcome(
                False, "schema_invalid", f"arguments for {name} do not match its schema: {detail}."
            )
        return GateOutcome(True, tool=tool)

    async def execute(
        self,
        run_id: str,
        call: CallRecord,
        tool: ToolDescriptor,
        run_tree: Sequence[str] = (),
        *,
        workspace: str | None = None,
        retry_in_doubt: bool = False,
        staged: str | None = None,
    ) -> ToolResult:
        request = ExecuteTool(
            run_id=run_id,
            call_id=call.id,
            name=tool.name,
            args=call.arguments,
            run_tree=list(run_tree),
            # The same call sent again (a retry, a takeover) is the same effect: the
            # runner runs a non-idempotent call once per key and answers repeats.
            idempotency_key=effect_key(run_id, call.id),
            retry_in_doubt=retry_in_doubt,
            workspace=workspace,
            staged=staged,  # an approved change set: applied instead of running the tool
            tenant=current_tenant.get(),  # whose own servers' tools the call may name
        )
        try:
            return await self.runner.execute(
                request, timeout_s=self.timeout_s, heartbeat_s=self.heartbeat_s
            )
        except TetherError as exc:
            # No reply: the runner may have died mid-call, so the outcome is unknown. No
            # responders: NATS delivered the call to nobody, so it certainly did not run.
            if exc.code == ErrorCode.NO_RESPONDERS:
                code = NO_RUNNER
            else:
                code = RUNNER_LOST if isinstance(exc, BusTimeoutError) else exc.code
            return ToolResult(
                call_id=call.id,
                name=tool.name,
                ok=False,
                content=f"FAILED: {code}: the tool could not be run ({exc.message}). "
                "Do not guess a result.",
                error_code=code,
            )
