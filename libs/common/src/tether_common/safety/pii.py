"""Personal data in text: e-mail addresses, phone numbers and payment card numbers (a
run of 13 to 19 digits that passes the Luhn check), found and replaced by
`[redacted:<kind>]`. A detector, not a proof: it errs towards finding (a 10-digit order
number looks like a phone number). Every quantifier is bounded (time linear in the text)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PiiHit", "find_pii", "luhn_ok", "redact_pii"]

_EMAIL = re.compile(
    r"(?<![\w.%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}"
    r"\.[A-Za-z]{2,24}(?![\w-])"
)
# Digits in groups separated by one space or dash (cards: 13 to 19 digits).
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
# An optional +country code, an optional (area), then groups: 9 to 15 digits in all.
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d{2,5}(?:[ .-]?\d{2,5}){1,5}(?![\w])"
)


@dataclass(frozen=True, slots=True)
class PiiHit:
    kind: str  # email | card | phone
    start: int
    end: int
    text: str


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum of a string of digits (what every card number passes)."""
    if not digits.isdigit():
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def find_pii(text: str) -> list[PiiHit]:
    """E-mail addresses, card numbers (Luhn), then phone numbers not inside either."""
    hits = [PiiHit("email", m.start(), m.end(), m.group()) for m in _EMAIL.finditer(text)]
    for m in _CARD.finditer(text):
        digits = _digits(m.group())
        if 13 <= len(digits) <= 19 and luhn_ok(digits):
            hits.append(PiiHit("card", m.start(), m.end(), m.group()))
    taken = [(h.start, h.end) for h in hits]
    for m in _PHONE.finditer(text):
        if any(s < m.end() and m.start() < e for s, e in taken):
            continue
        if 9 <= len(_digits(m.group())) <= 15:
            hits.append(PiiHit("phone", m.start(), m.end(), m.group()))
    return sorted(hits, key=lambda h: h.start)


def redact_pii(text: str) -> tuple[str, list[str]]:
    """`text` with each find replaced by `[redacted:<kind>]`, and the kinds found."""
    out: list[str] = []
    kinds: list[str] = []
    at = 0
    for hit in find_pii(text):
        if hit.start < at:
            continue
        out += [text[at : hit.start], f"[redacted:{hit.kind}]"]
        kinds.append(hit.kind)
        at = hit.end
    out.append(text[at:])
    return "".join(out), kinds
