"""Approvals settings (`TETHER_APPROVALS_*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import SettingsConfigDict

from tether_common.messages.approvals import DEFAULT_EXPIRY_S, QuorumRule
from tether_common.safety.urls import PrivateHosts
from tether_common.settings import HttpSettings
from tether_common.topology import port_of


class RequestMatch(BaseModel):
    """Which requests a rule is about: `tool` is a shell-style pattern; each list (None:
    any) must contain the request's value (its danger, reach, effect, scope, agent)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    tool: str = "*"
    danger: list[str] | None = None
    reach: list[str] | None = None
    effect: list[str] | None = None
    scope: list[str] | None = None
    agent: list[str] | None = None


class ApproverRule(RequestMatch):
    """One automated approver rule (see `tether_approvals.decisions.rules`); `no_opinion` parks the
    request for a person."""

    answer: Literal["allow_once", "deny", "no_opinion"]


class QuorumRuleSetting(RequestMatch):
    """Two keys for what it matches (`TETHER_APPROVALS_QUORUM_RULES`, see
    `tether_approvals.decisions.quorum`): e.g. `{"name": "prod", "tool": "deploy_*", "quorum":
    {"needed": 2, "group": "sre", "escalate_after_s": 600, "escalate_to": "leads"}}`."""

    quorum: QuorumRule


class WebhookSettings(BaseModel):
    """Delivery of notices (`TETHER_APPROVALS_WEBHOOKS__*`): retried with exponential
    back-off and jitter until `attempts` or `max_age_s` runs out, then dead-lettered."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(default=5.0, gt=0, le=60)
    attempts: int = Field(default=10, ge=1, le=100)
    backoff_s: float = Field(default=2.0, gt=0)
    backoff_max_s: float = Field(default=600.0, gt=0)
    max_age_s: float = Field(default=86400.0, gt=0)
    poll_s: float = Field(default=1.0, gt=0, le=60)
    batch: int = Field(default=20, ge=1, le=500)
    # A claimed delivery whose replica died is sent again after this long.
    claim_s: float = Field(default=60.0, gt=0)
    # Tenant operators register endpoints, so only public receivers are taken unless the
    # deployment (an admin) names private ones (a chat bridge on the same host, an
    # in-cluster service): `host` (any port) or `host:port`, `[v6]:port` for IPv6.
    private_hosts: list[str] = Field(
        default_factory=list,
        description="Loopback or private webhook receivers operators may register, as "
        "`host` or `host:port`; a cloud metadata service is never allowed.",
    )
    allow_private: bool = Field(
        default=False,
        description="Allow every loopback, private and link-local receiver (never a cloud "
        "metadata service): only where every operator may reach the service's network.",
    )

    @field_validator("private_hosts")
    @classmethod
    def _hosts_parse(cls, hosts: list[str]) -> list[str]:
        PrivateHosts.of(hosts)  # a bad entry stops the service with its reason
        return hosts

    def private(self) -> PrivateHosts:
        """The receivers allowed beyond public hosts."""
        return PrivateHosts.of(self.private_hosts, everything=self.allow_private)


class ApprovalSettings(HttpSettings):
    model_config = SettingsConfigDict(
        env_prefix="TETHER_APPROVALS_", env_nested_delimiter="__", extra="ignore"
    )

    http_port: int = port_of("approvals")
    default_expiry_s: float = Field(default=DEFAULT_EXPIRY_S, gt=0)
    sweep_interval_s: float = Field(default=1.0, gt=0, le=60)
    # A decision not yet on JetStream this long after it was made is re-sent by the sweeper.
    republish_after_s: float = Field(default=5.0, gt=0)
    presence_ttl_s: float = Field(default=15.0, gt=0)
    event_retention_s: float = Field(default=7 * 86400, gt=0)
    rules: list[ApproverRule] = Field(default_factory=list)
    quorum_rules: list[QuorumRuleSetting] = Field(
        default_factory=list,
        description="Requests that need several people; every matching rule counts and "
        "the strictest (with the request's own) wins.",
    )
    approvers: list[str] = Field(
        default_factory=list,
        description="Automated approvers a deployment registers, as `module:attribute`; "
        "asked after the rules, in order.",
    )
    audit_jsonl: Path | None = Field(
        default=None, description="Also append every audit record to this JSONL file (fsync)."
    )
    webhooks: WebhookSettings = Field(default_factory=lambda: WebhookSettings())
    public_url: str | None = Field(
        default=None,
        description="This service's address as people reach it (the approve/deny links of "
        "a notice's card); default http://<http_host>:<http_port>.",
    )

    console_url: str | None = Field(
        default=None,
        description="The operator console (the brain's `/console`) as people reach it: "
        "this service's `/` and `/console` then lead there, to its Approvals view "
        "(`tether up` sets it). None: this service serves the same console itself, with "
        "the Approvals view only.",
    )

    @field_validator("console_url")
    @classmethod
    def _console_is_a_page(cls, url: str | None) -> str | None:
        """An http(s) address without credentials or fragment: the redirect appends the
        view's fragment, and a Location header must never carry a secret."""
        if url is None:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"console_url must be an http(s) URL, not {url!r}")
        if parts.username or parts.password or parts.fragment:
            raise ValueError("console_url may carry no credentials and no fragment")
        return url

    def link_base(self) -> str:
        return (self.public_url or f"http://{self.http_host}:{self.http_port}").rstrip("/")
