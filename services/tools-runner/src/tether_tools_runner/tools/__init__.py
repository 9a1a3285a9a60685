"""The built-in tools, one module per family, and the one place that assembles them."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from tether_tools_runner.fetch import Fetcher, PublicGuard
from tether_tools_runner.file_workers import FileWorkers
from tether_tools_runner.folders import Workspaces
from tether_tools_runner.revisions import RevisionBook, Revisions
from tether_tools_runner.sandbox import Attestation, SandboxLimits
from tether_tools_runner.sandbox.identity import sandbox_user
from tether_tools_runner.settings import RunnerSettings
from tether_tools_runner.tool import Tool
from tether_tools_runner.tools.calculate import calculate_tools
from tether_tools_runner.tools.clock import clock_tools
from tether_tools_runner.tools.files_read import read_tools
from tether_tools_runner.tools.files_write import write_tools
from tether_tools_runner.tools.shell import shell_tools
from tether_tools_runner.tools.web_fetch import web_fetch_tools
from tether_tools_runner.tools.web_search import web_search_tools


@dataclass
class Builtins:
    """What the built-in tools need; tests replace the fetcher or the search transport.
    `book` is in memory unless the app gives the stored one (shared by replicas)."""

    settings: RunnerSettings
    attestation: Attestation
    book: Revisions = field(default_factory=RevisionBook)
    fetcher: Fetcher | None = None
    search_transport: httpx.AsyncBaseTransport | None = None
    workers: FileWorkers | None = None

    def file_workers(self) -> FileWorkers:
        """The file tools' I/O, as the sandbox user (worker processes when root); one per
        Builtins, closed by `close`."""
        if self.workers is None:
            user = sandbox_user(self.settings.sandbox_uid, self.settings.sandbox_gid)
            self.workers = FileWorkers(self.settings.workspace, user)
        return self.workers

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()

    def workspaces(self) -> Workspaces:
        user = sandbox_user(self.settings.sandbox_uid, self.settings.sandbox_gid)
        return Workspaces(self.settings.workspace, self.settings.workspace_layout, user)

    def limits(self) -> SandboxLimits:
        """Each shell call's limits (a staged one's too)."""
        return SandboxLimits(
            memory_mb=self.settings.sandbox_memory_mb,
            file_size_mb=self.settings.sandbox_file_size_mb,
            processes=self.settings.sandbox_pids_max,
            tmpfs_mb=self.settings.sandbox_tmpfs_mb,
        )

    def tools(self) -> list[Tool]:
        workspace = self.workspaces()
        workers = self.file_workers()
        fetcher = self.fetcher or Fetcher(
            PublicGuard(),
            max_bytes=self.settings.fetch_max_bytes,
            timeout_s=self.settings.fetch_timeout_s,
        )
        limits = self.limits()
        return [
            *clock_tools(),
            *calculate_tools(),
            *read_tools(workspace, workers, self.book),
            *write_tools(workspace, workers, self.book),
            *shell_tools(workspace, self.attestation, limits),
            *web_fetch_tools(fetcher),
            *web_search_tools(self.settings, self.search_transport),
        ]


__all__ = ["Builtins"]
