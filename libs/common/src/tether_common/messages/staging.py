"""Staged effects between brain, tools-runner and approvals: "approve the effect, not the
command".

A call that needs an operator and whose effect stays in the workspace is first run by the
runner against a copy of it (`tool_stage`, the same `ExecuteTool` body). The answer is a
`StagedEffect`: either the `ChangeSet` the call would make (created / modified / deleted
paths, a bounded unified diff for text, sizes and sha256 for binary files, and each
touched path's base digest), or `stageable=False` with the reason (network, processes
outside, a staging failure), in which case the call is approved the old way.

The change set rides on the approval card (`CreateApproval.changes`). Approving it sends
the call again on `tool_execute` with `ExecuteTool.staged` = the change set's digest: the
runner then applies exactly the stored change set, after checking every base digest; a
path changed underneath answers `STALE_EFFECT` and nothing is applied.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tether_common.messages.base import WireModel

# A change set applied only if nothing it touches changed since it was staged.
STALE_EFFECT = "stale_effect"
# A touched path's base when it did not exist at staging time.
ABSENT = "absent"
DIGEST_PATTERN = r"^[0-9a-f]{64}$"
# How the card shows a change: each file's diff is cut at this many characters, and the
# whole set's diffs at `MAX_DIFF_TOTAL` (the card rides a NATS message of at most 1 MiB).
MAX_DIFF_CHARS = 16_000
MAX_DIFF_TOTAL = 200_000
MAX_ENTRIES = 500
TRUNCATED_MARKER = "\n… diff truncated (the change set's digest covers the whole content) …\n"

ChangeKind = Literal["created", "modified", "deleted"]
EntryType = Literal["text", "binary", "dir"]


class ChangeEntry(WireModel):
    """One touched path. `base`: the workspace file's sha256 before (or `absent`);
    `digest`: its content after (None when deleted or a folder)."""

    path: str = Field(max_length=4096)
    change: ChangeKind
    type: EntryType
    base: str
    digest: str | None = None
    size_before: int | None = None
    size_after: int | None = None
    mode: int | None = Field(default=None, ge=0, le=0o777)
    diff: str | None = None
    diff_truncated: bool = False


class ChangeSet(WireModel):
    """What a staged call would change; `digest` covers every entry's path, change, base,
    new content digest and mode (not the diff text, which is derived from them)."""

    digest: str = Field(pattern=DIGEST_PATTERN)
    tool: str
    entries: list[ChangeEntry] = Field(default_factory=list, max_length=MAX_ENTRIES)
    # The staged command's own output (exit code and text, cut), for a `shell` call.
    output: str | None = None
    # Some diffs were cut to keep the card small (each entry says which).
    truncated: bool = False


class StagedEffect(WireModel):
    """The runner's answer to `tool_stage`."""

    call_id: str
    stageable: bool
    reason: str = ""
    changes: ChangeSet | None = None
    # The call as it stands would fail with this code (a file edit whose file changed
    # since it was read, a path refused): there is nothing to approve, and the model is
    # told at once instead of an operator being asked for a call that cannot succeed.
    error_code: str | None = None


__all__ = [
    "ABSENT",
    "DIGEST_PATTERN",
    "MAX_DIFF_CHARS",
    "MAX_DIFF_TOTAL",
    "MAX_ENTRIES",
    "STALE_EFFECT",
    "TRUNCATED_MARKER",
    "ChangeEntry",
    "ChangeKind",
    "ChangeSet",
    "EntryType",
    "StagedEffect",
]
