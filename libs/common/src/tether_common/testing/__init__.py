"""Fakes and helpers shipped with the library for tests and demos (never used in
production code paths)."""

from tether_common.testing.scripts import RunScript, Turn, call, event_data, say, write_script
from tether_common.testing.waiting import until, until_sync

__all__ = ["RunScript", "Turn", "call", "event_data", "say", "until", "until_sync", "write_script"]
