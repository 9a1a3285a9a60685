"""Lifecycle hooks: a tenant's own checks at four points of its runs (`points.py`),
asked over NATS, HTTPS or in process (`calling.py`, `builtins.py`), kept as a versioned,
audited tenant resource (`book.py`).

Owns: which hooks a tenant has, asking them within their timeouts, reading their
replies once, applying their failure modes, recording what they decided. Never does:
gate a call (a rewritten call goes back through every gate, `loop/acting.py`), widen
what the gates allow, or send anything to a destination the URL guard refuses."""

from tether_brain.hooks.book import HookBook, StoredHook, TenantHooks
from tether_brain.hooks.builtins import run_builtin
from tether_brain.hooks.calling import Caller, Destinations, Failed, output_keeper, read_reply
from tether_brain.hooks.points import (
    HOOK_DENIED,
    HOOK_FAILED,
    HOOKED_SUFFIX,
    AnswerVerdict,
    CallVerdict,
    Hooks,
    HookSource,
)

__all__ = [
    "HOOKED_SUFFIX",
    "HOOK_DENIED",
    "HOOK_FAILED",
    "AnswerVerdict",
    "CallVerdict",
    "Caller",
    "Destinations",
    "Failed",
    "HookBook",
    "HookSource",
    "Hooks",
    "StoredHook",
    "TenantHooks",
    "output_keeper",
    "read_reply",
    "run_builtin",
]
