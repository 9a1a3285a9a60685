"""Proof that a decision about an approval was made by the approvals service.

The approvals service signs every decision it makes (an operator's, an automated
approver's, expiry's) with HMAC-SHA256 under the decision key (`TETHER_DECISION_KEY`),
which only the approvals service and the brain hold, never the database. The proof covers
the approval id, the run id, the sealed action digest, the decision and its time, and for
an `edit` or a `respond` the digest of what the operator gave (`edit_digest`: the tool's
name and the new arguments; `response_digest`: the text); it is stored with the decision
row and travels on `ApprovalDecided`. The brain resumes a parked
run only with a decision whose proof verifies, so write access to the approvals table or
to the decisions subject is not enough to get an action run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import SecretStr

from tether_common.errors import ConfigError, ErrorCode
from tether_common.placeholders import is_placeholder

VERSION = "v1"
# Bound into every proof, so a MAC made for something else under the same key never
# passes as a decision.
DOMAIN = "tether.approval.decision"
MIN_KEY_CHARS = 32
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class DecisionFacts:
    """What a proof covers."""

    approval_id: str
    run_id: str
    action_digest: str
    decision: str
    decided_at: datetime
    # An edit's or a response's digest (None for every other decision, whose proofs are
    # then spelled exactly as before payloads existed, so stored ones still verify).
    payload: str | None = None


def _micros(moment: datetime) -> int:
    """The moment as whole microseconds since the epoch: PostgreSQL keeps microseconds,
    and an integer has one spelling whatever the time zone or the ISO form."""
    if moment.tzinfo is None:
        raise ValueError("a decision time must carry its time zone")
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _message(facts: DecisionFacts) -> bytes:
    fields = [
        DOMAIN,
        VERSION,
        facts.approval_id,
        facts.run_id,
        facts.action_digest,
        facts.decision,
        _micros(facts.decided_at),
    ]
    if facts.payload is not None:
        fields.append(facts.payload)
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode()


def _digest(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def edit_digest(tool: str, arguments: dict[str, Any]) -> str:
    """What an `edit` proof covers: the tool it is for (the brain puts the parked call's
    own name here, so an edit made for another tool never verifies) and the arguments."""
    return "edit:" + _digest({"tool": tool, "arguments": arguments})


def response_digest(text: str) -> str:
    """What a `respond` proof covers: the operator's text, exactly."""
    return "respond:" + _digest({"text": text})


def payload_of(
    decision: str, tool: str, arguments: dict[str, Any] | None, response: str | None
) -> str | None:
    """The payload digest a decision's proof covers (None: it carries none). A payload
    that does not fit its decision (an edit without arguments, a response on an allow) is
    spelled so that no proof made by the approvals service can match it."""
    if decision == "edit" and response is None:
        return edit_digest(tool, arguments) if arguments is not None else "edit:missing"
    if decision == "respond" and arguments is None:
        return response_digest(response) if response is not None else "respond:missing"
    if arguments is not None or response is not None:
        return "unexpected"
    return None


class DecisionKey:
    """Signs (approvals service) and verifies (brain) decisions."""

    def __init__(self, secret: str) -> None:
        check_key(secret)
        self._secret = secret.encode()

    @classmethod
    def generate(cls) -> DecisionKey:
        """A random key nobody else holds (tests that sign and verify in one process)."""
        return cls(new_key())

    def sign(self, facts: DecisionFacts) -> str:
        mac = hmac.new(self._secret, _message(facts), hashlib.sha256).hexdigest()
        return f"{VERSION}:{mac}"

    def verify(self, facts: DecisionFacts, proof: str | None) -> bool:
        if not proof:
            return False
        try:
            expected = self.sign(facts)
        except ValueError:  # a naive time cannot have been signed
            return False
        return hmac.compare_digest(expected.encode(), proof.encode("utf-8", "replace"))


def new_key() -> str:
    return secrets.token_urlsafe(32)


def check_key(secret: str) -> None:
    """Refuse a missing, short or template key: a guessable key is a forgeable decision."""
    if is_placeholder(secret) or len(secret) < MIN_KEY_CHARS:
        raise ConfigError(
            "TETHER_DECISION_KEY must be a random secret of at least "
            f"{MIN_KEY_CHARS} characters (not a template value); `tether up` makes one",
            code=ErrorCode.DECISION_KEY_INVALID,
        )


def required_key(secret: SecretStr | None) -> DecisionKey:
    """The key from the settings; the approvals service and the brain cannot run without."""
    if secret is None or not secret.get_secret_value():
        raise ConfigError(
            "TETHER_DECISION_KEY is not set: the approvals service signs decisions with it "
            "and the brain refuses decisions it cannot verify",
            code=ErrorCode.DECISION_KEY_MISSING,
        )
    return DecisionKey(secret.get_secret_value())
