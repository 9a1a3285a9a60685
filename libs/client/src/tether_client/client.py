"""`TetherClient`: the brain's HTTP API, every answer a typed model — runs (start, get,
list, stop, queue a message, follow their events, wait for their end), threads (create,
send, read, list, delete, chat), agents, the policy API (explain a call, an agent's tool
catalogue, a manual tool run, verify a run's audit trail), tokens, the kill switch,
quotas, hooks, documents, memory and schedules.

Each resource's methods live in a module of their own (`tether_client.resources`), on one
core (the connection, the request, the error table); `TetherClient` is their union and
adds nothing of its own, so a new resource is a module and one more base here.

Errors: every refusal raises the `tether_common.errors` class of its wire code, with
`code`, `message`, `retryable` and the HTTP `status`; a body the client cannot read as the
route's model raises `MessageError` (`invalid_message`), never a half-read value.
"""

from __future__ import annotations

from tether_client.resources.agents import Agents
from tether_client.resources.core import DEFAULT_API_URL, raise_for_error
from tether_client.resources.documents import Documents
from tether_client.resources.hooks import Hooks
from tether_client.resources.kill import Kills
from tether_client.resources.memory import Memory
from tether_client.resources.policy import Policy, ToolRunResult
from tether_client.resources.quotas import Quotas
from tether_client.resources.runs import Runs
from tether_client.resources.schedules import Schedules
from tether_client.resources.threads import Threads
from tether_client.resources.tokens import Tokens

__all__ = [
    "DEFAULT_API_URL",
    "TetherClient",
    "ToolRunResult",
    "raise_for_error",
]


class TetherClient(
    Runs,
    Threads,
    Agents,
    Policy,
    Tokens,
    Kills,
    Quotas,
    Hooks,
    Documents,
    Memory,
    Schedules,
):
    """The brain's API; `token` (a principal's bearer token) goes with every request:
    none given, `TETHER_TOKEN` from the environment; `""` sends none (anonymous).
    `transport`: an httpx transport for tests (`httpx.MockTransport`)."""
