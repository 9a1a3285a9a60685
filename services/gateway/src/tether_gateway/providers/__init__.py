"""Provider adapters, each on the `Provider` protocol: `rules` and `scripted` (offline),
`openai`, `anthropic` and `ollama` over HTTP, and `TextProtocol`, which wraps any of them
for models without native tool calling. Shared HTTP, retry and usage code lives in
`http`, `retry` and `turn`."""

from tether_gateway.providers.anthropic import AnthropicProvider
from tether_gateway.providers.base import Provider, estimate_tokens
from tether_gateway.providers.ollama import OllamaProvider
from tether_gateway.providers.openai import OpenAIProvider
from tether_gateway.providers.retry import RetryPolicy
from tether_gateway.providers.rules import RulesPlanner
from tether_gateway.providers.scripted import ScriptedProvider
from tether_gateway.providers.text_protocol import TextProtocol

__all__ = [
    "AnthropicProvider",
    "OllamaProvider",
    "OpenAIProvider",
    "Provider",
    "RetryPolicy",
    "RulesPlanner",
    "ScriptedProvider",
    "TextProtocol",
    "estimate_tokens",
]
