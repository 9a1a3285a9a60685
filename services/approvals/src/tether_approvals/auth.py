"""The approvals service's callers are the shared identity's principals
(tether_common.identity): this module only names what the service uses.

Roles that matter here: `viewer` (reads approvals), `approver` and `operator` (also
decide), `admin` (everything, tokens too); the token's `agents`/`owners` limits are the
team scope (`Principal.covers`). `TETHER_OPERATOR_TOKEN` is the bootstrap admin.
"""

from __future__ import annotations

from tether_common.identity import TOKENS_TRAIL, Principal, TokenStore

__all__ = ["TOKENS_TRAIL", "Principal", "TokenStore"]
