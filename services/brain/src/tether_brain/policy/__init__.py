"""Policy what-if over an agent's recorded history: its calls rebuilt from the audit
trail and the run journal (`history`, `linking`), decided again under a proposed policy by
the loop's own gates (`replay`), and the narrowest grants that would have allowed what
was allowed or approved and nothing that was denied (`suggest`). Reads only: it never
changes an agent, a run or a trail."""
