"""The hooks shipped in the box, run in process: `redact_secrets` (credentials, by the
patterns of `tether_common.safety.secrets`), `detect_pii` (e-mail addresses, phone
numbers, card numbers that pass Luhn: `tether_common.safety.pii`) and `deny_topics`
(words or phrases the tenant lists in `options.topics`, matched whole-word, any case).

What each does at each point:
- before_tool: a call whose arguments hold a find is denied (sending it would carry it).
- after_tool: the result is redacted (`deny_topics`: withheld whole).
- before_answer: the answer is replaced by its redacted text (`deny_topics`, and
  `detect_pii` with `options.action: block`: blocked).
- on_run_end: nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from tether_brain.hooks.book import StoredHook
from tether_common.messages.hooks import HookReply, HookRequest
from tether_common.safety.pii import redact_pii
from tether_common.safety.secrets import redact_secrets

Redactor = Callable[[str], tuple[str, list[str]]]


def _topics(hook: StoredHook) -> Redactor:
    words = [str(t) for t in hook.spec.options.get("topics", []) if str(t).strip()]
    if not words:
        return lambda text: (text, [])
    pattern = re.compile(
        r"(?i)(?<!\w)(?:" + "|".join(re.escape(w.strip()) for w in words) + r")(?!\w)"
    )

    def withhold(text: str) -> tuple[str, list[str]]:
        found = sorted({m.group().lower() for m in pattern.finditer(text)})
        return (f"[withheld: mentions {', '.join(found)}]", found) if found else (text, [])

    return withhold


def _redactor(hook: StoredHook) -> Redactor:
    match hook.spec.target:
        case "redact_secrets":
            return redact_secrets
        case "detect_pii":
            return redact_pii
        case _:
            return _topics(hook)


def _blocks_answers(hook: StoredHook) -> bool:
    return hook.spec.target == "deny_topics" or (
        hook.spec.target == "detect_pii" and hook.spec.options.get("action") == "block"
    )


def run_builtin(hook: StoredHook, request: HookRequest) -> HookReply:
    redact = _redactor(hook)
    match request.point:
        case "before_tool":
            assert request.call is not None
            _, found = redact(json.dumps(request.call.arguments, ensure_ascii=False))
            if found:
                return HookReply(action="deny", reason=_why(hook, found))
        case "after_tool":
            text, found = redact(request.result or "")
            if found:
                return HookReply(action="redact", content=text, reason=_why(hook, found))
        case "before_answer":
            text, found = redact(request.answer or "")
            if found and _blocks_answers(hook):
                return HookReply(action="block", reason=_why(hook, found))
            if found:
                return HookReply(action="replace", answer=text, reason=_why(hook, found))
        case "on_run_end":
            pass
    return HookReply()


def _why(hook: StoredHook, found: list[str]) -> str:
    kinds = ", ".join(sorted(set(found)))
    if hook.spec.target == "deny_topics":
        return f"the tenant's hook '{hook.spec.name}' does not allow these topics: {kinds}"
    return f"the tenant's hook '{hook.spec.name}' found {kinds}"
