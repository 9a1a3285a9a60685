"""Tool servers as a tenant resource: `/v1/tool-servers` on the brain, and the requests
the brain forwards to the tools-runner, which owns the rows and the credentials key.

A server is an MCP server over streamable HTTP (any operator of a tenant) or over stdio
(admins only: its command runs on the runner's host). Its credentials (HTTP headers such
as `Authorization`, or a stdio server's environment) are write-only: stored sealed, sent
only to that server, and shown back as `has_credentials` alone. A server is its tenant's,
or `shared` (admins): shared servers, and those of the runner's settings, are offered to
every tenant; a tenant's are offered to its own runs only."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal, Self

from pydantic import Field, model_validator

from tether_common.messages.base import ID_PATTERN, WireModel, WireRequest

ToolServerTransport = Literal["http", "stdio"]
ToolServerState = Literal["connecting", "up", "failed"]
# The tenant column of a shared server: no tenant can be named this (ID_PATTERN).
SHARED_TENANT = "*"
# A server name is one token of `mcp.<server>.<tool>`: no dot.
SERVER_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,40}$"
# An HTTP header name (RFC 9110 token) or an environment variable name.
CREDENTIAL_NAME_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$"
MAX_CREDENTIALS = 16
MAX_CREDENTIAL_VALUE = 8192
# Hop-by-hop and framing headers a credential may not set: the transport owns them.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "accept",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)


def credential_problem(credentials: dict[str, str]) -> str | None:
    """Why `credentials` cannot be stored, in words that never quote a value, or None.
    (Checked by hand: a validation error of pydantic's would carry the value.)"""
    if len(credentials) > MAX_CREDENTIALS:
        return f"at most {MAX_CREDENTIALS} credentials"
    for name, value in credentials.items():
        if not isinstance(value, str) or len(value) > MAX_CREDENTIAL_VALUE:
            return f"credential {name!r} must be text of at most {MAX_CREDENTIAL_VALUE} characters"
        if any(ch in value for ch in "\r\n\x00"):
            return f"credential {name!r} holds a line break or NUL"
    return None


class ToolServerSpec(WireRequest):
    """`POST /v1/tool-servers`: one MCP server to add. `headers` (HTTP) or `env` (stdio)
    are its credentials, never shown back. `shared` and `tenant` (another tenant's
    server) are for admins."""

    name: str = Field(pattern=SERVER_NAME_PATTERN)
    transport: ToolServerTransport = "http"
    url: str | None = Field(default=None, max_length=2000)
    command: str | None = Field(default=None, max_length=1000)
    args: list[str] = Field(default_factory=list, max_length=100)
    headers: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    trusted: bool = False
    shared: bool = False
    tenant: str | None = Field(default=None, pattern=ID_PATTERN, max_length=200)

    @model_validator(mode="after")
    def _fits_transport(self) -> Self:
        if self.transport == "http" and (self.url is None or self.command or self.args):
            raise ValueError("an http server has a url and no command")
        if self.transport == "http" and self.env:
            raise ValueError("an http server's credentials are headers, not env")
        if self.transport == "stdio" and (self.command is None or self.url is not None):
            raise ValueError("a stdio server has a command and no url")
        if self.transport == "stdio" and self.headers:
            raise ValueError("a stdio server's credentials are env, not headers")
        if self.shared and self.tenant is not None:
            raise ValueError("a shared server belongs to no tenant")
        for names in (self.headers, self.env):
            for name in names:
                if not _is_credential_name(name):
                    raise ValueError("a credential name must be an HTTP token (A-Z, 0-9, -_.)")
                if name.lower() in RESERVED_HEADERS and self.transport == "http":
                    raise ValueError(f"the header {name!r} is set by the transport")
        if (problem := credential_problem({**self.headers, **self.env})) is not None:
            raise ValueError(problem)
        return self

    @property
    def credentials(self) -> dict[str, str]:
        return dict(self.headers) if self.transport == "http" else dict(self.env)


def _is_credential_name(name: str) -> bool:
    return re.fullmatch(CREDENTIAL_NAME_PATTERN, name) is not None


class AddToolServer(WireRequest):
    """Brain → runner: add `spec` as `tenant`'s server (`SHARED_TENANT`: shared)."""

    spec: ToolServerSpec
    tenant: str = Field(max_length=200)
    added_by: str = Field(max_length=300)


class ToolServerView(WireModel):
    """One server as its tenant's operators see it: never its credentials."""

    server_id: str
    name: str
    tenant: str | None  # None: shared
    shared: bool
    transport: ToolServerTransport
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    trusted: bool = False
    has_credentials: bool = False
    # On the runner replica that answered: how its connection is, and why it failed.
    state: ToolServerState = "connecting"
    failure: str = ""
    tools: list[str] = Field(default_factory=list)
    created_by: str = ""
    created_at: datetime | None = None


class ListToolServers(WireRequest):
    """Brain → runner: the servers of `tenant` and the shared ones (None: every one)."""

    tenant: str | None = Field(default=None, max_length=200)


class ToolServerList(WireModel):
    servers: list[ToolServerView]


class RemoveToolServer(WireRequest):
    """Brain → runner: remove a server within the caller's reach (`tenant` None: any;
    a shared server only then). Outside the reach it is `not_found`."""

    server_id: str = Field(pattern=ID_PATTERN, max_length=200)
    tenant: str | None = Field(default=None, max_length=200)


class ToolServerRemoved(WireModel):
    server_id: str


class ToolServersChanged(WireRequest):
    """Broadcast among runner replicas: a server was added or removed; each re-reads."""

    server_id: str = Field(max_length=200)


__all__ = [
    "CREDENTIAL_NAME_PATTERN",
    "RESERVED_HEADERS",
    "SERVER_NAME_PATTERN",
    "SHARED_TENANT",
    "AddToolServer",
    "ListToolServers",
    "RemoveToolServer",
    "ToolServerList",
    "ToolServerRemoved",
    "ToolServerSpec",
    "ToolServerState",
    "ToolServerTransport",
    "ToolServerView",
    "ToolServersChanged",
    "credential_problem",
]
