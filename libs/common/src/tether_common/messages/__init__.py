"""Versioned wire models, one module per conversation; JSON on the wire.

Every body has `extra="forbid"` and a `version`; every reply is the route's reply model
or an `ErrorReply(code, message)`.
"""

from tether_common.messages.base import (
    ErrorDetail,
    ErrorReply,
    WireModel,
    decode,
    decode_reply,
    encode,
)

__all__ = ["ErrorDetail", "ErrorReply", "WireModel", "decode", "decode_reply", "encode"]
