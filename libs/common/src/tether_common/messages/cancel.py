"""A caller gone: the notice a requester sends when it stops waiting for a cancellable
route's answer (`Route.cancellable`), so the replica still working on it stops.

The notice names the request by the reply inbox it was sent with, which the caller's
NATS client minted for that one request (under the caller's own inbox prefix, with 12
random characters per connection); only the route's callers may publish notices at all
(`tether_client.server.natsauth`), and no other user may subscribe to a caller's inboxes
to learn one. A notice naming an inbox no handler here answers is ignored.
"""

from __future__ import annotations

from pydantic import Field

from tether_common.messages.base import WireModel

__all__ = ["CancelNotice"]


class CancelNotice(WireModel):
    """Stop handling the request whose replies go to `inbox`; its caller is gone."""

    inbox: str = Field(min_length=1, max_length=256)
