"""Asking one hook: the request sent by its transport (a NATS service, an HTTPS endpoint,
a built-in), within its timeout, and its reply read once, here, whatever carried it: at
most `max_reply_bytes`, JSON, a `HookReply` that fits the point. Anything else is a
`Failed` with a reason (`timeout`, `unreachable`, `refused`, `http_status`, `too_large`,
`malformed`, `wrong_shape`, `error`) for the caller's failure mode; nothing raises.

HTTPS hooks go where the webhooks go (`tether_common.safety`): the URL checked as
written when the hook is added, then at every call the name resolved once, every
answer checked, and the connection made to the checked address with `Host` and the TLS
name kept (no DNS rebinding), no redirect followed, no connection reused. Plain http is
taken only for a host the deployment names (`TETHER_BRAIN_HOOKS_PRIVATE_HOSTS`). The
body is signed with the hook's secret (`Tether-Signature`, `tether_common.signing`)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

import httpx
from pydantic import ValidationError

from tether_brain.hooks.book import StoredHook
from tether_common.errors import (
    BlockedDestination,
    BusTimeoutError,
    ErrorCode,
    MessageError,
    TetherError,
)
from tether_common.messages.base import encode, loads_strict
from tether_common.messages.hooks import HookReply, HookRequest
from tether_common.messages.outputs import MAX_INLINE_BYTES, OutputStored, PutOutput
from tether_common.safety import Resolver, check, check_address, system_resolver
from tether_common.safety.pinning import pin
from tether_common.safety.urls import PrivateHosts
from tether_common.signing import SIGNATURE_HEADER, sign
from tether_common.subjects import Route, Subjects

HOOK_HEADER = "Tether-Hook"


class RawBus(Protocol):
    """What a NATS hook needs of the bus (`tether_common.bus.Bus` has it)."""

    subjects: Subjects

    async def request_raw(self, subject: str, data: bytes, *, timeout: float = ...) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Failed:
    reason: str
    detail: str


Answer = HookReply | Failed
Builtin = Callable[[StoredHook, HookRequest], HookReply]


class _RefusedError(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.failed = Failed(reason, detail)


class Destinations:
    """Where an https hook may be sent: public hosts over https, and the deployment's
    named private hosts (over http or https)."""

    def __init__(self, private: PrivateHosts, resolver: Resolver = system_resolver) -> None:
        self.private = private
        self.resolver = resolver

    def registered(self, url: str) -> str:
        """The URL as given, or 422 `hook_refused` saying why (nothing resolved)."""
        try:
            self._as_written(url)
        except BlockedDestination as exc:
            hint = "; a loopback or private endpoint must be named by the deployment (TETHER_BRAIN_HOOKS_PRIVATE_HOSTS)"
            raise MessageError(exc.message + hint, code=ErrorCode.HOOK_REFUSED) from None
        return url

    def pinned_url(self, url: str) -> tuple[str, dict[str, str], dict[str, str]]:
        """(URL to dial, headers, httpx extensions) for a call now; BlockedDestination."""
        self._as_written(url)
        allowed = self.private.admits(url)
        pinned = pin(url, self.resolver, partial(check_address, private_ok=allowed))
        return pinned.url, pinned.headers, pinned.extensions

    def _as_written(self, url: str) -> None:
        if url.lower().startswith("http://") and not self.private.admits(url):
            raise BlockedDestination(
                "a hook is called over https (http only for a named private host)"
            )
        try:
            check(url, resolver=_unresolved, private=self.private)
        except BlockedDestination as exc:
            if exc.code != ErrorCode.DNS_FAILED:  # only a name left to resolve passes
                raise


def _unresolved(host: str) -> list[str]:
    raise LookupError(host)


def read_reply(data: bytes, request: HookRequest, max_bytes: int) -> Answer:
    """A hook's reply, read once whatever carried it."""
    if len(data) > max_bytes:
        return Failed("too_large", f"the reply is over {max_bytes} bytes")
    try:
        raw = loads_strict(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return Failed("malformed", f"the reply is not JSON: {exc}")
    if not isinstance(raw, dict):
        return Failed("malformed", "the reply is not a JSON object")
    if "error" in raw and set(raw) <= {"version", "error"}:
        return Failed("error", "the hook answered an error")
    try:
        reply = HookReply.model_validate(raw)
    except ValidationError as exc:
        return Failed(
            "wrong_shape", f"the reply is not a hook reply ({exc.error_count()} problems)"
        )
    problem = reply.problem(request.point)
    return reply if problem is None else Failed("wrong_shape", problem)


class Caller:
    def __init__(
        self,
        bus: RawBus | None,
        builtin: Builtin,
        destinations: Destinations,
        *,
        max_reply_bytes: int = 256 * 1024,
        ca_file: Path | None = None,
    ) -> None:
        self.bus = bus
        self.builtin = builtin
        self.destinations = destinations
        self.max_reply_bytes = max_reply_bytes
        self.tls = ssl.create_default_context()
        if ca_file is not None:
            self.tls.load_verify_locations(cafile=str(ca_file))

    async def call(self, hook: StoredHook, request: HookRequest) -> Answer:
        spec = hook.spec
        try:
            async with asyncio.timeout(spec.timeout_s):
                if spec.transport == "builtin":
                    return self.builtin(hook, request)
                if spec.transport == "nats":
                    data = await self._nats(hook, request)
                else:
                    data = await self._https(hook, request)
        except TimeoutError:
            return Failed("timeout", f"no reply within {spec.timeout_s:g}s")
        except BusTimeoutError:
            return Failed("timeout", f"no reply within {spec.timeout_s:g}s")
        except BlockedDestination as exc:
            return Failed("refused", exc.message)
        except _RefusedError as exc:
            return exc.failed
        except TetherError as exc:
            return Failed("unreachable", exc.message)
        except (httpx.HTTPError, OSError, ssl.SSLError) as exc:
            return Failed("unreachable", type(exc).__name__)
        return read_reply(data, request, self.max_reply_bytes)

    async def _nats(self, hook: StoredHook, request: HookRequest) -> bytes:
        if self.bus is None:
            raise _RefusedError("unreachable", "no bus")
        subject = self.bus.subjects.hook(hook.spec.target).subject
        return await self.bus.request_raw(subject, encode(request), timeout=hook.spec.timeout_s)

    async def _https(self, hook: StoredHook, request: HookRequest) -> bytes:
        url, headers, extensions = self.destinations.pinned_url(hook.spec.target)
        body = encode(request)
        headers |= {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(hook.secret or "", body),
            HOOK_HEADER: hook.spec.name,
        }
        limits = httpx.Limits(max_keepalive_connections=0)
        async with (
            httpx.AsyncClient(verify=self.tls, follow_redirects=False, limits=limits) as client,
            client.stream(
                "POST", url, content=body, headers=headers, extensions=extensions
            ) as response,
        ):
            if response.status_code != 200:
                raise _RefusedError(
                    "http_status", f"the endpoint answered HTTP {response.status_code}"
                )
            data = bytearray()
            async for piece in response.aiter_bytes():
                data += piece
                if len(data) > self.max_reply_bytes:
                    break  # enough to refuse it
            return bytes(data)


class OutputBus(Protocol):
    """What keeping an original needs of the bus (`tether_common.bus.Bus` has it)."""

    subjects: Subjects

    async def request(
        self, route: Route[PutOutput, OutputStored], body: PutOutput, *, timeout: float = ...
    ) -> OutputStored: ...


def output_keeper(bus: OutputBus) -> Callable[[str, str], Awaitable[str | None]]:
    """Keeps a hooked result's original in the output-store under `run_id` (a run id no
    run has: only an operator reaching every run reads it); None when too large."""

    async def keep(run_id: str, text: str) -> str | None:
        if len(text.encode()) > MAX_INLINE_BYTES:
            return None
        stored = await bus.request(
            bus.subjects.output_put, PutOutput(run_id=run_id, content=text), timeout=10.0
        )
        return stored.ref

    return keep
