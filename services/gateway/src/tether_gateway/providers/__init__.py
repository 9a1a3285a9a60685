"""Provider adapters, each on the `Provider` protocol."""

from tether_gateway.providers.base import Provider, estimate_tokens
from tether_gateway.providers.rules import RulesPlanner
from tether_gateway.providers.scripted import ScriptedProvider

__all__ = ["Provider", "RulesPlanner", "ScriptedProvider", "estimate_tokens"]
