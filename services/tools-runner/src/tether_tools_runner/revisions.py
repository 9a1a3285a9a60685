"""Which revision of which file each run has read: the read-before-write check of `file_edit`.

`Revisions` is the edge: `revision_store.StoredRevisions` keeps them in PostgreSQL, so a
run whose read landed on one replica can edit through another (kept out of this module:
the file workers import it, and need no database driver); `RevisionBook` is the in-memory
one (a single runner without a database, and tests), bounded on both axes (runs, then
paths per run), least recently used first out."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Protocol


def revision_of(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


class Revisions(Protocol):
    async def record(self, run_id: str, path: str, revision: str) -> None: ...

    async def seen(self, run_id: str, path: str) -> str | None: ...


class RevisionBook:
    def __init__(self, *, max_runs: int = 1000, max_paths: int = 500) -> None:
        self._runs: OrderedDict[str, OrderedDict[str, str]] = OrderedDict()
        self.max_runs = max_runs
        self.max_paths = max_paths

    async def record(self, run_id: str, path: str, revision: str) -> None:
        paths = self._runs.pop(run_id, None) or OrderedDict()
        paths.pop(path, None)
        paths[path] = revision
        while len(paths) > self.max_paths:
            paths.popitem(last=False)
        self._runs[run_id] = paths
        while len(self._runs) > self.max_runs:
            self._runs.popitem(last=False)

    async def seen(self, run_id: str, path: str) -> str | None:
        paths = self._runs.get(run_id)
        if paths is None:
            return None
        self._runs.move_to_end(run_id)
        return paths.get(path)


__all__ = ["RevisionBook", "Revisions", "revision_of"]
