"""What the brain takes from a model's profile: its prompt tier and context window. The
gateway owns profiles
(`tether_common.messages.profiles`); the brain asks `model_profile` and keeps the answer
for `ttl_s`, so a step costs no extra round trip. A profile the gateway cannot give (an
older gateway, a bus failure, a model name it refuses) counts as the `full` tier, and is
asked again only after `ttl_s`. The brain's `prompt_tiers` setting, per model or
provider, overrides the profile (an operator's say over a probe's finding), and so do its
`context_windows` for the window."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from pydantic import ValidationError

from tether_common.bus import Bus
from tether_common.errors import TetherError
from tether_common.messages.profiles import (
    DEFAULT_CONTEXT_WINDOW,
    ModelProfile,
    ProfileQuery,
    PromptTier,
)

log = logging.getLogger(__name__)

PROFILE_TIMEOUT_S = 2.0  # a profile is a lookup: a gateway slower than this is not waited for


class Profiles:
    def __init__(
        self,
        bus: Bus | None,
        *,
        ttl_s: float = 30.0,
        overrides: Mapping[str, PromptTier] | None = None,
        windows: Mapping[str, int] | None = None,
        default_window: int = DEFAULT_CONTEXT_WINDOW,
    ) -> None:
        self.bus = bus
        self.ttl_s = ttl_s
        self.overrides = dict(overrides or {})
        self.windows = dict(windows or {})
        self.default_window = default_window
        self._known: dict[tuple[str, str | None], tuple[float, ModelProfile | None]] = {}

    async def tier(self, provider: str, model: str | None) -> PromptTier:
        for key in (model, provider):
            if key is not None and (tier := self.overrides.get(key)) is not None:
                return tier
        profile = await self.profile(provider, model)
        return profile.prompt_tier if profile is not None else "full"

    async def window(self, provider: str, model: str | None) -> int:
        """The model's context window in tokens: the brain's setting for the model or its
        provider, else the profile's, else the default."""
        for key in (model, provider):
            if key is not None and (window := self.windows.get(key)) is not None:
                return window
        profile = await self.profile(provider, model)
        return profile.context_window if profile is not None else self.default_window

    async def profile(self, provider: str, model: str | None) -> ModelProfile | None:
        """The model's profile from the gateway (cached), or None when it gives none."""
        key = (provider, model)
        known = self._known.get(key)
        if known is not None and time.monotonic() - known[0] < self.ttl_s:
            return known[1]
        found = await self._ask(provider, model)
        self._known[key] = (time.monotonic(), found)
        return found

    async def _ask(self, provider: str, model: str | None) -> ModelProfile | None:
        if self.bus is None:  # no gateway to ask (in process): the settings alone
            return None
        try:
            query = ProfileQuery(provider=provider, model=model)
            return await self.bus.request(
                self.bus.subjects.model_profile, query, timeout=PROFILE_TIMEOUT_S
            )
        except (TetherError, ValidationError) as exc:
            log.info("no profile for %s/%s (full prompt tier): %s", provider, model, exc)
            return None
