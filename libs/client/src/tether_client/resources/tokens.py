"""Tokens (`/v1/tokens`): create a principal's token, list them, revoke one (admin)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether_client.resources.core import ClientCore

# The identity models load with the first call that needs them (`tether runs list` does not).
if TYPE_CHECKING:
    from tether_common.messages.identity import CreateToken, TokenCreated, TokenList, TokenView

__all__ = ["Tokens"]


class Tokens(ClientCore):
    """Principals' bearer tokens."""

    async def create_token(self, body: CreateToken) -> TokenCreated:
        """A new principal's token (admin); the plain token is in the answer, only there."""
        from tether_common.messages.identity import TokenCreated

        return await self._call(TokenCreated, "POST", "/v1/tokens", body)

    async def list_tokens(self) -> TokenList:
        from tether_common.messages.identity import TokenList

        return await self._call(TokenList, "GET", "/v1/tokens")

    async def revoke_token(self, token_id: str) -> TokenView:
        from tether_common.messages.identity import TokenView

        return await self._call(TokenView, "DELETE", f"/v1/tokens/{token_id}")
