"""The gateway's profile routes on the bus: one profile (the brain asks before prompting),
the stored list, writing one, and probing a model (see `tether_common.messages.profiles`).

Only the brain may call the gateway's routes (NATS permissions), and it checks who asked
over HTTP first; a provider the gateway does not serve is `not_found`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

from tether_common.bus import Bus
from tether_common.errors import ConfigError, NotFoundError
from tether_common.messages.profiles import (
    ListProfiles,
    ModelProfile,
    ProbeModel,
    ProbeReport,
    ProfileList,
    ProfileQuery,
    PutProfile,
)
from tether_gateway.probe import ProviderFor, probe
from tether_gateway.profiles import Profiles

log = logging.getLogger(__name__)

# One probe at a time per gateway: each is a dozen or more generations, and two at once
# on a local model only make both slower.
_probing = asyncio.Lock()


def _known(providers: Collection[str], provider: str) -> None:
    if provider not in providers:
        raise NotFoundError(f"no provider {provider!r}; the providers are: {', '.join(providers)}")


def _store(profiles: Profiles, profile: ModelProfile) -> ModelProfile:
    try:
        path = profiles.store.put(profile)
    except OSError as exc:
        raise ConfigError(f"the profile could not be stored: {exc}") from exc
    log.info("model profile %s/%s stored in %s", profile.provider, profile.model, path)
    return profile


async def serve_profiles(
    bus: Bus, profiles: Profiles, provider_for: ProviderFor, providers: Collection[str]
) -> None:
    """Subscribe the four profile routes."""
    subjects = bus.subjects

    async def get(query: ProfileQuery) -> ModelProfile:
        _known(providers, query.provider)
        return profiles.get(query.provider, query.model)

    async def listed(query: ListProfiles) -> ProfileList:
        found, problems = profiles.store.scan()
        kept = [p for p in found if query.provider in (None, p.provider)]
        return ProfileList(profiles=kept, problems=problems)

    async def put(body: PutProfile) -> ModelProfile:
        _known(providers, body.profile.provider)
        source = "probed" if body.profile.source == "probed" else "set"
        return _store(profiles, body.profile.model_copy(update={"source": source}))

    async def probed(body: ProbeModel) -> ProbeReport:
        _known(providers, body.provider)
        async with _probing:
            report = await probe(provider_for, profiles, body.provider, body.model)
        if body.store:
            _store(profiles, report.profile)
        return report.model_copy(update={"stored": body.store})

    await bus.serve(subjects.model_profile, get)
    await bus.serve(subjects.model_profiles, listed)
    await bus.serve(subjects.model_profile_put, put)
    await bus.serve(subjects.model_probe, probed)


__all__ = ["serve_profiles"]
