"""Quotas (`/v1/quotas/{tenant}`): a tenant's limits and what is used of them now."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether_client.resources.core import ClientCore

if TYPE_CHECKING:
    from tether_common.messages.quotas import Quota, QuotaView

__all__ = ["Quotas"]


class Quotas(ClientCore):
    """Tenants' quotas."""

    async def quota(self, tenant: str) -> QuotaView:
        """The tenant's quota and what is used of it now (admins; the tenant's operators)."""
        from tether_common.messages.quotas import QuotaView

        return await self._call(QuotaView, "GET", f"/v1/quotas/{tenant}")

    async def set_quota(
        self, tenant: str, quota: Quota, *, version: int | None = None
    ) -> QuotaView:
        """Replace the tenant's quota (admin): every limit left None is none."""
        from tether_common.messages.quotas import QuotaBody, QuotaView

        body = QuotaBody(quota=quota, version=version)
        return await self._call(QuotaView, "PUT", f"/v1/quotas/{tenant}", body)
