"""Where a webhook may be delivered: the shared URL guard (`tether_common.safety.urls`)
with the private receivers the deployment allows (`WebhookSettings.private_hosts`,
`allow_private`), checked when an endpoint is registered and again, on the address
actually dialled, at every delivery (`tether_common.safety.pinning`).

Registration judges the URL as written (scheme, credentials, the address in any
spelling, local and metadata names) and resolves nothing: a name's answers are judged
when it is used, and a refusal then tells a tenant operator nothing about the service's
network. A delivery resolves the name once, checks every answer and connects to the
checked one, so DNS cannot answer differently in between (rebinding); the deployment's
settings of that moment apply, so a private host no longer allowed is no longer sent to.
"""

from __future__ import annotations

from functools import partial

from tether_approvals.settings import WebhookSettings
from tether_common.errors import BlockedDestination, ErrorCode, MessageError
from tether_common.safety import Resolver, check, check_address, system_resolver
from tether_common.safety.pinning import Pinned, pin

__all__ = ["Destinations"]

HINT = (
    "; a loopback or private receiver must be named by the deployment "
    "(TETHER_APPROVALS_WEBHOOKS__PRIVATE_HOSTS)"
)


def _unresolved(host: str) -> list[str]:
    """Registration resolves nothing: a name is judged at each delivery."""
    raise LookupError(host)


class Destinations:
    def __init__(self, settings: WebhookSettings, resolver: Resolver = system_resolver) -> None:
        self.private = settings.private()
        self.resolver = resolver

    def registered(self, url: str) -> str:
        """The endpoint URL as given, or 422 `webhook_url_refused` saying why."""
        try:
            self._as_written(url)
        except BlockedDestination as exc:
            raise MessageError(exc.message + HINT, code=ErrorCode.WEBHOOK_URL_REFUSED) from None
        return url

    def pinned(self, url: str) -> Pinned:
        """Where to send a delivery now; `BlockedDestination` (`blocked_destination`,
        `dns_failed`) when its URL or any address its host resolves to is refused."""
        self._as_written(url)
        allowed = self.private.admits(url)
        return pin(url, self.resolver, partial(check_address, private_ok=allowed))

    def _as_written(self, url: str) -> None:
        try:
            check(url, resolver=_unresolved, private=self.private)
        except BlockedDestination as exc:
            if exc.code != ErrorCode.DNS_FAILED:  # only a name left to resolve passes
                raise
