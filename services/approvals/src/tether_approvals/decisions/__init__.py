"""How a request is decided: its lifecycle (pending → granted / denied / expired →
consumed, or withdrawn), each transition one transaction holding the row lock and signed
with the decision key; automated approvers, quorums of people and escalation; what a
decision says on the bus and in the audit trail.

Never serves a route or a subject (`api` does) and never delivers a notice: it writes
the notices' outbox rows in its transaction and `notices` sends them.
"""
