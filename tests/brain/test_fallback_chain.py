"""The fallback chain's rules without services: which failure is which condition, the
models a turn may ask and in what order, the chain a run may use now (never wider than
its agent's lists and its starter's rights), a definition that reaches outside its
agent's lists refused, and the error of a turn whose every model failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tether_brain.agents.config import Agents
from tether_brain.clients.fallback import (
    Attempt,
    chain,
    condition_of,
    failure,
    in_force,
    next_after,
)
from tether_brain.runs.access import Access
from tether_brain.settings import BrainSettings
from tether_brain.testing import Harness
from tether_common.errors import ErrorCode
from tether_common.identity import Principal, Role
from tether_common.messages.agents import AgentConfig, ModelChoice
from tether_common.testing import say


def choice(provider: str, model: str | None = None, *on: str) -> ModelChoice:
    return ModelChoice.model_validate(
        {"provider": provider, "model": model} | ({"when": list(on)} if on else {})
    )


@pytest.mark.parametrize(
    ("code", "condition"),
    [
        (ErrorCode.PROVIDER_RATE_LIMITED, "rate_limit"),
        (ErrorCode.PROVIDER_UNAVAILABLE, "error"),
        (ErrorCode.PROVIDER_UNREACHABLE, "error"),
        (ErrorCode.PROVIDER_DISCONNECTED, "error"),
        (ErrorCode.PROVIDER_ERROR, "error"),
        (ErrorCode.PROVIDER_TIMEOUT, "timeout"),
        (ErrorCode.TIMEOUT, "timeout"),
        (ErrorCode.PROVIDER_AUTH, None),
        (ErrorCode.PROVIDER_BAD_REQUEST, None),
        (ErrorCode.PROVIDER_BAD_RESPONSE, None),
        (ErrorCode.PROVIDER_NOT_CONFIGURED, None),
        (ErrorCode.NO_RESPONDERS, None),
        ("a_code_from_a_newer_gateway", None),
    ],
)
def test_each_failure_meets_its_condition_or_none(code: str, condition: str | None) -> None:
    assert condition_of(code) == condition


def test_the_chain_starts_with_the_runs_model_and_asks_no_model_twice() -> None:
    models = chain(
        "openai",
        "a",
        [
            choice("openai", "a"),
            choice("openai", "b"),
            choice("anthropic", "b"),
            choice("openai", "b"),
        ],
    )
    assert [(c.provider, c.model) for c in models] == [
        ("openai", "a"),
        ("openai", "b"),
        ("anthropic", "b"),
    ]
    assert set(models[0].when) == {"error", "rate_limit", "timeout"}


def test_a_failure_goes_to_the_next_entry_that_takes_it() -> None:
    models = chain(
        "openai",
        "a",
        [choice("openai", "b", "rate_limit"), choice("openai", "c", "error", "timeout")],
    )
    assert next_after(models, 0, ErrorCode.PROVIDER_RATE_LIMITED) == 1
    assert next_after(models, 0, ErrorCode.PROVIDER_UNAVAILABLE) == 2  # b takes no errors
    assert next_after(models, 1, ErrorCode.PROVIDER_TIMEOUT) == 2
    assert next_after(models, 1, ErrorCode.PROVIDER_RATE_LIMITED) is None  # c does not
    assert next_after(models, 2, ErrorCode.PROVIDER_UNAVAILABLE) is None  # the end
    assert next_after(models, 0, ErrorCode.PROVIDER_AUTH) is None  # never switches


def test_the_chain_in_force_is_the_agents_now_within_what_was_pinned() -> None:
    pinned = [choice("openai", "b"), choice("openai", "c")]
    agent = AgentConfig(
        providers=["openai"],
        models=["a", "b", "c", "d"],
        fallback=[choice("openai", "d"), choice("openai", "c", "timeout"), choice("openai", "b")],
    )
    # d was added after the start: not the starter's; the in-force order and `on` count.
    assert [(c.model, c.when) for c in in_force(pinned, agent)] == [
        ("c", ["timeout"]),
        ("b", ["error", "rate_limit", "timeout"]),
    ]
    narrowed = AgentConfig(
        providers=["openai"], models=["a", "c"], fallback=[choice("openai", "c")]
    )
    assert [c.model for c in in_force(pinned, narrowed)] == ["c"]
    assert in_force(pinned, AgentConfig()) == []  # the chain was emptied


@pytest.mark.parametrize(
    ("lists", "entry", "words"),
    [
        (
            {"providers": ["openai"]},
            {"provider": "anthropic", "model": "a"},
            "provider 'anthropic'",
        ),
        ({"models": ["a", "b"]}, {"provider": "openai", "model": "c"}, "model 'c'"),
        ({"models": ["a"]}, {"provider": "openai"}, "no model is named"),
        (
            {"providers": ["openai"], "models": ["a", "b"]},
            {"provider": "ollama", "model": "b"},
            "provider 'ollama'",
        ),
        (
            {"providers": ["openai", "anthropic"], "models": ["a"]},
            {"provider": "anthropic", "model": "claude"},
            "model 'claude'",
        ),
    ],
)
def test_a_chain_entry_outside_the_agents_lists_is_refused(
    lists: dict[str, Any], entry: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValidationError, match=words):
        AgentConfig.model_validate(
            lists | {"fallback": [{"provider": "openai", "model": "a"}, entry]}
        )


@pytest.mark.parametrize(
    "entry",
    [
        {"provider": ""},
        {"provider": "openai", "when": []},
        {"provider": "openai", "when": ["bad_request"]},
        {"provider": "openai", "also": 1},
    ],
)
def test_a_malformed_entry_is_refused(entry: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AgentConfig.model_validate({"fallback": [entry]})


def test_old_definitions_keep_loading_and_models_stays_the_allow_list() -> None:
    old = AgentConfig.model_validate({"providers": ["openai"], "models": ["a", "b"]})
    assert old.fallback == []
    assert old.models == ["a", "b"]


def test_an_exhausted_chain_names_each_attempt_in_order() -> None:
    error = failure(
        [
            Attempt("openai", "a", ErrorCode.PROVIDER_RATE_LIMITED, "openai answered HTTP 429"),
            Attempt("openai", "b", ErrorCode.PROVIDER_UNAVAILABLE, "x" * 1000),
        ]
    )
    assert error.code == ErrorCode.PROVIDER_UNAVAILABLE
    assert error.message.startswith(
        "2 models failed: 1. openai/a: provider_rate_limited: openai answered HTTP 429; "
        "2. openai/b: provider_unavailable: xxx"
    )
    assert len(error.message) < 500  # each attempt's message is cut


def _principal(role: Role, lists: dict[str, list[str]]) -> Principal:
    limits = {name: frozenset(values) for name, values in lists.items()}
    return Principal("p", role, "default", **limits)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("role", "lists", "kept"),
    [
        ("admin", {}, ["openai/b", "anthropic/c", "rules"]),
        # A token's model list does not hold a provider's default (None), as for a run's own.
        ("operator", {"models": ["c"]}, ["anthropic/c", "rules"]),
        ("operator", {"providers": ["openai"]}, ["openai/b"]),
        # Below operator, what the token does not list is the configured default only.
        ("user", {}, ["rules"]),
        ("user", {"providers": ["openai"], "models": ["b"]}, ["openai/b"]),
    ],
)
def test_the_chain_a_run_pins_is_what_its_starter_may_use(
    role: Role, lists: dict[str, list[str]], kept: list[str]
) -> None:
    agent = AgentConfig(fallback=[choice("openai", "b"), choice("anthropic", "c"), choice("rules")])
    agents = Agents({}, workspace=Path("."), guardrails={}, allowlist=[])
    access = Access(None, agents, provider="rules", model=None)  # type: ignore[arg-type]
    found = access.fallback_for(_principal(role, lists), agent)
    assert [c.label for c in found] == kept


# ---- the turn down the chain, in process (`tether_brain.testing.Harness`) -------------

FAILED_429 = {"kind": "error", "code": "provider_rate_limited", "message": "HTTP 429"}


def chained(fallback: list[ModelChoice], **settings: Any) -> Harness:
    """A harness whose agent `fb` falls back on `fallback`; its scripts `b` and `c`
    answer (each with its usage)."""
    agent = AgentConfig(fallback=fallback)
    harness = Harness(settings=BrainSettings(agents={"fb": agent}, **settings))
    for name in ("b", "c"):
        usage = {"kind": "usage", "input_tokens": 10, "output_tokens": 2, "cost": 0.25}
        harness.model.scripts[name] = {"turns": [[say(f"From {name}.")[0], usage]]}
    return harness


async def test_every_attempts_usage_counts_and_the_answering_model_is_asked_once() -> None:
    harness = chained([choice("scripted", "b")])
    spent = {"kind": "usage", "input_tokens": 7, "output_tokens": 0, "cost": 1.0}
    run = await harness.run(
        [[spent, FAILED_429]],
        agent="fb",
        agent_tenant="default",
        fallback=[choice("scripted", "b")],
    )
    assert (run.state.status, run.state.answer) == ("completed", "From b.")
    assert [r.model for r in harness.model.requests][1:] == ["b"]
    assert (run.state.usage.input_tokens, run.state.usage.cost) == (17, 1.25)
    [switch] = [g for g in run.data("guard") if g["kind"] == "model_fallback"]
    assert (switch["code"], switch["reason"], switch["to_model"]) == (
        "provider_rate_limited",
        "rate_limit",
        "b",
    )


async def test_an_entry_the_agent_dropped_since_the_start_is_not_asked() -> None:
    harness = chained([choice("scripted", "c")])  # the run pinned b; the agent now has c
    run = await harness.run(
        [[FAILED_429]], agent="fb", agent_tenant="default", fallback=[choice("scripted", "b")]
    )
    assert run.state.status == "failed"
    assert run.state.stop_reason == "model_error: provider_rate_limited: HTTP 429"
    assert len(harness.model.requests) == 1


async def test_a_fallback_that_could_exceed_max_cost_is_not_asked() -> None:
    harness = chained([choice("scripted", "b")], prices={"b": {"input": 1e9, "output": 1e9}})
    run = await harness.run(
        [[FAILED_429]],
        agent="fb",
        agent_tenant="default",
        fallback=[choice("scripted", "b")],
        max_cost=1.0,
    )
    assert run.state.status == "failed"
    assert len(harness.model.requests) == 1
    [guard] = [g for g in run.data("guard") if g["kind"] == "budget_exhausted"]
    assert "scripted/b" in guard["why"]
