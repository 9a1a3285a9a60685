"""Large tool outputs: store a blob, read it back by ref."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from tether_common.messages.base import WireModel

# Bodies stay well under NATS' default 1 MiB payload after base64 and JSON framing.
MAX_INLINE_BYTES = 512 * 1024


class PutOutput(WireModel):
    run_id: str
    media_type: str = "text/plain"
    encoding: Literal["utf-8", "base64"] = "utf-8"
    content: str = Field(max_length=MAX_INLINE_BYTES * 2)


class OutputStored(WireModel):
    ref: str
    size: int
    sha256: str
    expires_at: datetime


class GetOutput(WireModel):
    ref: str
    run_id: str
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=MAX_INLINE_BYTES, ge=1, le=MAX_INLINE_BYTES)


class OutputContent(WireModel):
    ref: str
    size: int
    offset: int
    encoding: Literal["utf-8", "base64"]
    content: str
    eof: bool
