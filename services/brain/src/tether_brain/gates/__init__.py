"""The gates every tool call passes, in order: organisation guardrails, validation,
permissions (modes, categories, hard denials, the shell classifier), grants and scope,
the untrusted-content bar, budget, approval. A refusal is a value the model reads."""

from tether_brain.gates.grants import Grant, GrantSet, parse_grants
from tether_brain.gates.policy import AgentPolicy, Verdict, decide

__all__ = ["AgentPolicy", "Grant", "GrantSet", "Verdict", "decide", "parse_grants"]
