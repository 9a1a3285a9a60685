"""The approvals service's operator API as the CLI calls it (bearer token on every call),
and approval references: a full approval id or a unique prefix of one (with or without
`apr_`), found among the requests the token may read, so a prefix never reveals another
team's requests.

The API is at `TETHER_APPROVALS_URL` (else where `tether up` put it, else
http://127.0.0.1:8701); it takes the operator token.
"""

from __future__ import annotations

import re
from types import TracebackType
from typing import Any

import httpx

from tether_client.client import raise_for_error
from tether_client.endpoints import approvals_url
from tether_client.runref import LISTED, REF_CHARS, one_of
from tether_client.session import required_token
from tether_common.errors import MessageError
from tether_common.messages.approvals import ApprovalList, ApprovalView
from tether_common.messages.audit import AuditReport

__all__ = ["ApprovalsClient", "approvals", "resolve_approval_id"]

FULL_APPROVAL_ID = re.compile(r"apr_[0-9a-f]{32}")
# What can only be the start of an approval id; anything else is passed on whole, for
# the service to find or not.
APPROVAL_ID_PREFIX = re.compile(r"apr_[0-9a-f]{0,31}|[0-9a-f]{1,31}")


class ApprovalsClient:
    """The approvals service's operator API (bearer token on every call)."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout)

    async def __aenter__(self) -> ApprovalsClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._http.request(method, path, **kwargs)
        raise_for_error(response)
        return response.json()

    async def list(
        self,
        status: str = "pending",
        run_id: str | None = None,
        *,
        id_prefix: str | None = None,
        limit: int = 100,
    ) -> list[ApprovalView]:
        """Requests in `status` (`all`: any), oldest first."""
        params: dict[str, str | int] = {"status": status, "limit": limit}
        params |= {"run_id": run_id} if run_id else {}
        params |= {"id_prefix": id_prefix} if id_prefix else {}
        found = await self._call("GET", "/v1/approvals", params=params)
        return ApprovalList.model_validate(found).approvals

    async def get(self, approval_id: str) -> ApprovalView:
        return ApprovalView.model_validate(await self._call("GET", f"/v1/approvals/{approval_id}"))

    async def decide(
        self,
        approval_id: str,
        decision: str,
        note: str | None,
        *,
        arguments: dict[str, Any] | None = None,
        text: str | None = None,
    ) -> ApprovalView:
        """A decision; `edit` carries the call's new `arguments`, `respond` the `text` the
        model reads instead of the tool's result."""
        body: dict[str, Any] = {"decision": decision} | ({"note": note} if note else {})
        body |= {"arguments": arguments} if arguments is not None else {}
        body |= {"text": text} if text is not None else {}
        found = await self._call("POST", f"/v1/approvals/{approval_id}/decision", json=body)
        return ApprovalView.model_validate(found)

    async def audit(self, run_id: str) -> AuditReport:
        return AuditReport.model_validate(await self._call("GET", f"/v1/audit/{run_id}"))


def approvals() -> ApprovalsClient:
    return ApprovalsClient(approvals_url(), required_token())


async def resolve_approval_id(client: ApprovalsClient, ref: str) -> str:
    """The request `ref` names: a full id as is, else the one request (of any status) the
    token may read whose id starts with it (or with `apr_` + it)."""
    ref = ref.strip()
    if FULL_APPROVAL_ID.fullmatch(ref):
        return ref
    if not REF_CHARS.fullmatch(ref):
        raise MessageError(f"{ref!r} is not an approval id or a prefix of one")
    if not APPROVAL_ID_PREFIX.fullmatch(ref):
        return ref
    prefix = ref if ref.startswith("apr_") else f"apr_{ref}"
    listed = await client.list("all", id_prefix=prefix, limit=LISTED + 1)
    # Checked here too: a service that ignores `id_prefix` must not make any prefix match.
    found = [a.approval_id for a in listed if a.approval_id.startswith(prefix)]
    return one_of(ref, found, "approval", more=len(listed) > LISTED)
