"""Tools-runner settings (`TETHER_RUNNER_*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from tether_common.safety.urls import PrivateHosts
from tether_common.settings import HttpSettings, default_workspace
from tether_common.topology import port_of

SearchProvider = Literal["brave", "tavily", "serper", "searxng"]
# `shared`: every run works in the workspace root itself (one user's project folder).
# `per_tree`: each run tree (a run and its sub-agents) gets its own folder under the root,
# which only it can reach: the layout for many users, and for many replicas sharing one
# volume.
WorkspaceLayout = Literal["shared", "per_tree"]


class McpServer(BaseModel):
    """One configured MCP server: a stdio command, or a streamable-HTTP URL."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,40}$")
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    # Declared by the operator: this server's results hold only text under the operator's
    # control, so they do not raise a run's untrusted-content bar. Off by default.
    trusted: bool = False


class RunnerSettings(HttpSettings):
    model_config = SettingsConfigDict(env_prefix="TETHER_RUNNER_", extra="ignore")

    http_port: int = port_of("tools-runner")
    workspace: Path = Field(default_factory=default_workspace)
    workspace_layout: WorkspaceLayout = "shared"
    # A replica running a non-idempotent call renews its claim on the call's key this
    # often (a third of the lease); a claim not renewed for `effect_lease_s` belonged to a
    # replica that died, and a repeat of its key is answered `in_doubt`.
    effect_lease_s: float = Field(default=10.0, ge=1, le=300)
    # Recorded outcomes and read revisions older than this are swept.
    effects_retention_s: float = Field(default=7 * 86400.0, ge=3600)
    default_timeout_s: float = Field(default=30.0, gt=0, le=120)
    # Per tool, the weakest sandbox level it may run under, e.g. {"shell": "bwrap"}.
    min_sandbox: dict[str, str] = Field(default_factory=lambda: {"shell": "bwrap"})
    # Processes per shell call: RLIMIT_NPROC, or a pids cgroup when the runner is root.
    sandbox_pids_max: int = Field(default=256, ge=8)
    sandbox_memory_mb: int = Field(default=1024, ge=64)
    sandbox_file_size_mb: int = Field(default=100, ge=1)
    # The sandbox's private /tmp (also its HOME and /dev/shm): one tmpfs of this size.
    sandbox_tmpfs_mb: int = Field(default=256, ge=4)
    # Who shell commands run as on the host when the runner is root (never root itself).
    sandbox_uid: int = Field(default=64000, ge=1)
    sandbox_gid: int = Field(default=64000, ge=1)
    fetch_max_bytes: int = Field(default=2_000_000, ge=1024)
    fetch_timeout_s: float = Field(default=20.0, gt=0, le=120)
    search_provider: SearchProvider | None = None
    brave_api_key: str | None = None
    tavily_api_key: str | None = None
    serper_api_key: str | None = None
    searxng_url: str | None = None
    mcp_servers: list[McpServer] = Field(default_factory=list)
    # How often each MCP server's tool list is re-read; also how soon a silent death shows.
    mcp_refresh_s: float = Field(default=30.0, gt=0)
    # An MCP server's handshake (start, initialize, first tool list) must finish within
    # this; after `mcp_max_attempts` failed connections in a row it is `failed` (calls of
    # its tools are answered `mcp_failed`) and is retried only at the longest back-off.
    mcp_connect_timeout_s: float = Field(default=30.0, gt=0, le=600)
    mcp_max_attempts: int = Field(default=5, ge=1, le=100)
    # Tool servers added through `/v1/tool-servers` (tenant_servers): the key that seals
    # their credentials at rest (32 bytes, base64url; `tether up` makes one in its home),
    # the loopback or private hosts they may be on (none by default: a tenant's server is
    # a public https one), and how often each replica re-reads the rows.
    credentials_key: SecretStr | None = Field(
        default=None,
        description="key sealing tool servers' credentials (32 bytes, base64url); none: "
        "servers with credentials cannot be added",
    )
    tool_server_private_hosts: list[str] = Field(
        default_factory=list,
        description="loopback or private hosts tool servers may be on, as `host` or "
        "`host:port` (a cloud metadata service never)",
    )
    tool_servers_refresh_s: float = Field(default=30.0, gt=0)
    # Staged effects (tether_tools_runner.staging): where a staged shell call's scratch
    # copy of the workspace is made (None: `staging` in TETHER_HOME, which the runner's
    # user can make; beside a workspace at `/workspace` would be `/`), and the most a copy
    # (or the files a staged call touches) may hold.
    staging_dir: Path | None = None
    staging_max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    offload_thresholds: dict[str, int] = Field(
        default_factory=dict,
        description="per-tool bytes above which a result is offloaded (default 8 KiB, shell 4 KiB)",
    )

    @field_validator("tool_server_private_hosts")
    @classmethod
    def _hosts_parse(cls, hosts: list[str]) -> list[str]:
        PrivateHosts.of(hosts)  # a bad entry stops the service with its reason
        return hosts
