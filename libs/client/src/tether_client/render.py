"""Run events as readable terminal lines, and the style each kind is shown in."""

from __future__ import annotations

import json

from tether_common.messages.runs import RunEvent

RULES_NOTE = "(rules: a deterministic planner, not a language model)"

_STYLES = {
    "run.start": "bold",
    "tool.call": "cyan",
    "tool.approval_needed": "bold yellow",
    "tool.approved": "green",
    "tool.denied": "red",
    "guard": "yellow",
}


def style(event: RunEvent) -> str:
    if event.kind == "tool.result":
        return "green" if event.data.get("ok") else "red"
    if event.kind == "run.end":
        return "bold green" if event.data.get("status") == "completed" else "bold red"
    if event.kind == "step":
        return "dim"
    return _STYLES.get(event.kind, "")


def render(event: RunEvent) -> str | None:
    d = event.data
    match event.kind:
        case "run.start":
            note = f" {RULES_NOTE}" if d.get("provider") == "rules" else ""
            return f"▶ run {event.run_id} — provider {d.get('provider')}{note}"
        case "step":
            thinking = d.get("thinking")
            return f"  … thinking: {thinking[:300]}" if thinking else None
        case "tool.call":
            return f"→ {d.get('name')} {json.dumps(d.get('arguments'), ensure_ascii=False)}"
        case "tool.result":
            mark = "✓" if d.get("ok") else "✗"
            return f"← {mark} {d.get('name')}: {d.get('content')}"
        case "run.end":
            reason = f" ({d.get('stop_reason')})" if d.get("stop_reason") else ""
            answer = d.get("answer") or ""
            return f"■ {d.get('status')}{reason}\n{answer}"
        case "guard" | "compaction" | "skill.used" | "agent.start" | "agent.end":
            return f"  [{event.kind}] {json.dumps(d, ensure_ascii=False)[:300]}"
        case "tool.approval_needed" | "tool.approved" | "tool.denied":
            return f"  [{event.kind}] {d.get('name', '')} {d.get('reason', '')}"
        case "usage":
            return None
