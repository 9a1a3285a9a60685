"""The webhook signature on every notice: `tether_common.signing` (one scheme for approval
and run notices and HTTPS hooks: `Tether-Signature: t=<unix seconds>,v1=<hex>`, HMAC-SHA256
with the endpoint's secret over `"<t>.<raw body>"`), plus what only notices carry: the
`Tether-Delivery` header (the notice id, the same on every re-send, so a receiver drops a
delivery it already handled: delivery is at least once), the `Tether-Event` header (the
notice's kind), and the `whsec_` prefix of the secrets this service makes.
"""

from __future__ import annotations

from tether_common import signing
from tether_common.signing import SIGNATURE_HEADER, TOLERANCE_S, sign, verify

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SECRET_PREFIX",
    "SIGNATURE_HEADER",
    "TOLERANCE_S",
    "new_secret",
    "sign",
    "verify",
]

DELIVERY_HEADER = "Tether-Delivery"
EVENT_HEADER = "Tether-Event"
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return signing.new_secret(SECRET_PREFIX)
