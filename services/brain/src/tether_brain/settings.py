"""Brain settings (`TETHER_BRAIN_*`; the provider and step ceiling also as `TETHER_PROVIDER`,
`TETHER_MODEL` and `TETHER_MAX_STEPS`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import SettingsConfigDict

from tether_brain.agents.config import AgentConfig
from tether_brain.skills import default_skill_folders
from tether_common.messages.profiles import DEFAULT_CONTEXT_WINDOW, PromptTier
from tether_common.safety.urls import PrivateHosts
from tether_common.settings import HttpSettings

STEP_CEILING = 20
# A link the console shows: http(s) only (never `javascript:`), one line.
TraceUrl = Annotated[str, Field(pattern=r"^https?://[^\s<>\"']+$", max_length=2000)]


class BrainSettings(HttpSettings):
    model_config = SettingsConfigDict(env_prefix="TETHER_BRAIN_", extra="ignore")

    http_port: int = 8700
    provider: str = Field(
        default="rules", validation_alias=AliasChoices("TETHER_BRAIN_PROVIDER", "TETHER_PROVIDER")
    )
    model: str | None = Field(
        default=None, validation_alias=AliasChoices("TETHER_BRAIN_MODEL", "TETHER_MODEL")
    )
    max_steps: int = Field(
        default=6,
        ge=1,
        le=1000,
        validation_alias=AliasChoices("TETHER_BRAIN_MAX_STEPS", "TETHER_MAX_STEPS"),
    )
    step_ceiling: int = Field(
        default=STEP_CEILING,
        ge=1,
        le=1000,
        description="no run takes more steps, whatever it asks (raised only for benchmarks)",
    )
    max_calls_per_step: int = Field(default=3, ge=1, le=10)
    model_timeout_s: float = Field(default=300.0, gt=0, description="silence allowed mid-stream")
    tool_timeout_s: float = Field(default=130.0, gt=0)
    tool_heartbeat_s: float = Field(
        default=3.0,
        ge=0,
        le=60,
        description="the runner beats this often while a call runs; after 3 missed beats "
        "the brain treats the call as lost (0: wait for tool_timeout_s)",
    )
    service_wait_s: float = Field(
        default=30.0,
        ge=0,
        le=600,
        description="how long a run waits for a gateway or runner that nobody answers for "
        "(a restart) before a model turn fails or a call is reported not run",
    )
    catalog_ttl_s: float = Field(default=30.0, ge=0)
    lease_s: float = Field(
        default=10.0, gt=0, description="a replica's hold on a run; another takes over after it"
    )
    lease_margin: float = Field(
        default=0.2,
        gt=0,
        lt=0.5,
        description="share of lease_s kept in hand: a replica stops acting on a run (fences "
        "it) once lease_s * (1 - lease_margin) has passed since its last successful renewal",
    )
    bus_loss_s: float = Field(
        default=5.0,
        gt=0,
        description="after this long without a NATS round trip a replica stops renewing its "
        "leases and adopting runs (it cannot move them): they pass to a replica that can",
    )
    drain_s: float = Field(default=20.0, ge=0, description="graceful shutdown: time to hand back")
    workspace: Path = Field(
        default_factory=lambda: Path.home() / ".tether" / "workspace",
        validation_alias=AliasChoices("TETHER_BRAIN_WORKSPACE", "TETHER_RUNNER_WORKSPACE"),
        description="the tools-runner's workspace, for path checks in the gates",
    )
    skill_folders: list[Path] = Field(
        default_factory=lambda: default_skill_folders(Path("skills")),
        description="searched in order; the first is where new skills are written",
    )
    default_context_window: int = Field(
        default=DEFAULT_CONTEXT_WINDOW, ge=512, description="tokens"
    )
    context_windows: dict[str, int] = Field(
        default_factory=dict, description="per model (or provider) name: its context window"
    )
    usage_providers: list[str] = Field(
        default_factory=lambda: ["openai", "anthropic", "ollama", "scripted"],
        description="providers whose token usage is reported, not estimated (max_tokens needs it)",
    )
    prompt_tiers: dict[str, PromptTier] = Field(
        default_factory=dict,
        description="per model or provider: full|compact, over the model's profile from the gateway",
    )
    profile_ttl_s: float = Field(default=30.0, ge=0, description="how long a profile is kept")
    prices: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description='per model or provider: {"input": $, "output": $} per million tokens',
    )
    approval_expiry_s: float = Field(default=180.0, gt=0, le=7 * 86400)
    # The runs console's link to a run's trace (console/): an http(s) URL with `{trace_id}`
    # and/or `{run_id}`, e.g. Jaeger's `http://localhost:16686/trace/{trace_id}`.
    trace_url: TraceUrl | None = Field(
        default=None, description="the tracing UI's page of one trace (console link)"
    )
    # The scheduler (schedules/firing.py): each replica polls for due schedules.
    schedule_poll_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="how often a replica looks for due schedules (jittered ±50%)",
    )
    schedule_grace_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="a schedule's tick later than this was missed (no brain ran): its catch_up rule decides",
    )
    # How stale a replica's agents and policy may be if it missed a change's broadcast.
    grants_refresh_s: float = Field(default=5.0, gt=0)
    # The next three only SEED the stored agents and organisation policy (agent_store.py):
    # written where missing, or while still unchanged through the API; never over a change.
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    guardrails: dict[str, Literal["confirm", "deny"]] = Field(
        default_factory=dict, description="organisation guardrails: tool id or glob → confirm|deny"
    )
    allowlist: list[str] = Field(
        default_factory=list, description="project allowlist: grant entries that need no approval"
    )
    # Lifecycle hooks (hooks/): where an https hook may be sent beyond public hosts, and
    # what the brain trusts and reads of them.
    hooks_private_hosts: list[str] = Field(
        default_factory=list,
        description="loopback or private hosts an https hook may name, as `host` or "
        "`host:port` (an admin's setting; a cloud metadata service is never allowed); "
        "plain http is taken only for these",
    )
    hooks_ca_file: Path | None = Field(
        default=None,
        description="a CA bundle https hooks are verified against, beside the system's",
    )
    hooks_refresh_s: float = Field(
        default=2.0, ge=0, description="how stale a replica's copy of a tenant's hooks may be"
    )
    hooks_max_reply_bytes: int = Field(
        default=256 * 1024,
        ge=1024,
        le=4 * 1024 * 1024,
        description="a longer hook reply is refused",
    )

    @field_validator("hooks_private_hosts")
    @classmethod
    def _hooks_hosts_parse(cls, hosts: list[str]) -> list[str]:
        PrivateHosts.of(hosts)  # a bad entry stops the service with its reason
        return hosts
