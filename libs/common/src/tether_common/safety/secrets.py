"""Credentials in text: the one table of what a secret looks like, and `redact`, which
replaces each with `[redacted:<kind>]`.

Two families. Assignments whose name says credential (`OPENAI_API_KEY=…`,
`password: …`): the names are the endings the supervisor strips from a service's
environment (`topology.CREDENTIAL_SUFFIXES`) and the sandbox never hands a command, so
a name the sandbox withholds is a name whose value is withheld here too. And token
shapes providers give their credentials (AWS, GitHub, Slack, OpenAI-style `sk-`, Google,
JWTs, PEM private keys, bearer headers, credentials in a URL), with Tether's own
(`tth_` tokens, `whsec_`/`hksec_` signing secrets).

Every quantifier is bounded, so a long text costs time linear in its length."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tether_common.topology import CREDENTIAL_SUFFIXES

__all__ = ["SECRET_PATTERNS", "SecretHit", "find_secrets", "redact_secrets"]

# A name ending in one of the environment's credential endings (`_API_KEY`, `_TOKEN` …,
# `-` or `_` before it), or a word that is itself one (`password`, `secret` …).
_NAME_ENDINGS = "|".join("[_-]" + re.escape(s.lstrip("_")) for s in CREDENTIAL_SUFFIXES)
_NAME_WORDS = "password|passwd|pwd|secret|token|apikey|credentials?"
# `NAME=value`, `NAME: value`, `"name": "value"`.
_ASSIGNED = re.compile(
    r"(?i)(?P<keep>(?:\b[A-Za-z0-9_.]{0,64}(?:[A-Za-z0-9](?:"
    + _NAME_ENDINGS
    + r"))|\b(?:[A-Za-z0-9_.-]{0,64}[_-])?(?:"
    + _NAME_WORDS
    + r"))[\"']?\s{0,4}[:=]\s{0,4}[\"']?)(?P<secret>[^\s\"',;]{4,512})"
)

SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[\s\S]{0,20000}?-----END [A-Z ]{0,40}PRIVATE KEY-----"
        ),
    ),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b")),
    (
        "github_token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{22,255})"),
    ),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,255}")),
    ("api_key", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,255}")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("tether_token", re.compile(r"\btth_[A-Za-z0-9_-]{20,255}")),
    ("signing_secret", re.compile(r"\b(?:whsec|hksec)_[A-Za-z0-9_-]{20,255}")),
    (
        "jwt",
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,4096}\.eyJ[A-Za-z0-9_-]{8,8192}\.[A-Za-z0-9_-]{8,4096}"),
    ),
    ("bearer", re.compile(r"(?i)\bbearer\s{1,4}[A-Za-z0-9._~+/-]{16,1024}=*")),
    ("url_password", re.compile(r"(?<=://)[^/\s:@]{1,256}:[^/\s@]{1,256}(?=@)")),
)


@dataclass(frozen=True, slots=True)
class SecretHit:
    kind: str
    start: int
    end: int


def find_secrets(text: str) -> list[SecretHit]:
    """Every credential in `text`, by position (overlaps kept: `redact_secrets` merges)."""
    hits = [
        SecretHit(kind, m.start(), m.end())
        for kind, pattern in SECRET_PATTERNS
        for m in pattern.finditer(text)
    ]
    hits += [
        SecretHit("assigned", m.start("secret"), m.end("secret")) for m in _ASSIGNED.finditer(text)
    ]
    return sorted(hits, key=lambda h: (h.start, -h.end))


def redact_secrets(text: str) -> tuple[str, list[str]]:
    """`text` with every credential replaced by `[redacted:<kind>]`, and the kinds found
    (in order, one per replacement)."""
    out: list[str] = []
    kinds: list[str] = []
    at = 0
    for hit in find_secrets(text):
        if hit.start < at:  # inside one already replaced
            continue
        out.append(text[at : hit.start])
        out.append(f"[redacted:{hit.kind}]")
        kinds.append(hit.kind)
        at = hit.end
    out.append(text[at:])
    return "".join(out), kinds
