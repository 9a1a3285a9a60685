"""The brain's model-profile API over HTTP, forwarded to the gateway that owns profiles
(`tether_common.messages.profiles`): list, show, set, probe. `tether models` uses it.

Who may: reading needs `agents.read` (a profile says how models are prompted, as an
agent's settings do). Writing and probing change how every tenant's runs are prompted,
so they need `policy.write` over every tenant: an admin.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from tether_brain.api.deps import BusDep
from tether_common.errors import AuthError, ErrorCode
from tether_common.identity import Principal
from tether_common.identity.http import Caller
from tether_common.messages.profiles import (
    MODEL_PATTERN,
    PROVIDER_PATTERN,
    ListProfiles,
    ModelProfile,
    ProbeModel,
    ProbeReport,
    ProfileList,
    ProfileQuery,
    PutProfile,
)

# A probe is a dozen generations or more; on a small CPU model each takes half a minute.
PROBE_TIMEOUT_S = 1800.0
ProviderQuery = Annotated[str | None, Query(pattern=PROVIDER_PATTERN)]
ModelQuery = Annotated[str | None, Query(pattern=MODEL_PATTERN)]
ProviderPath = Annotated[str, Path(pattern=PROVIDER_PATTERN)]


def _instance_wide(who: Principal) -> None:
    who.require("policy.write")
    if who.reach_of("policy.write") != "all":
        raise AuthError(
            "model profiles apply to every tenant: an admin sets them", code=ErrorCode.FORBIDDEN
        )


router = APIRouter(prefix="/v1", tags=["models"])


@router.get("/model-profiles")
async def list_profiles(bus: BusDep, who: Caller, provider: ProviderQuery = None) -> ProfileList:
    """The stored profiles (and any profile file the gateway could not read)."""
    who.require("agents.read")
    return await bus.request(bus.subjects.model_profiles, ListProfiles(provider=provider))


@router.get("/model-profiles/{provider}")
async def show_profile(
    provider: ProviderPath, bus: BusDep, who: Caller, model: ModelQuery = None
) -> ModelProfile:
    """One model's profile as the gateway applies it (stored, else the default)."""
    who.require("agents.read")
    query = ProfileQuery(provider=provider, model=model)
    return await bus.request(bus.subjects.model_profile, query)


@router.put("/model-profiles")
async def set_profile(body: ModelProfile, bus: BusDep, who: Caller) -> ModelProfile:
    _instance_wide(who)
    return await bus.request(bus.subjects.model_profile_put, PutProfile(profile=body))


@router.post("/model-profiles/probe")
async def probe_model(body: ProbeModel, bus: BusDep, who: Caller) -> ProbeReport:
    _instance_wide(who)
    return await bus.request(bus.subjects.model_probe, body, timeout=PROBE_TIMEOUT_S)


__all__ = ["router"]
