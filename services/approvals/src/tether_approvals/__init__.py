"""Tether approvals: approval requests and their lifecycle (pending → granted / denied /
expired / consumed), the operator API and console, operator tokens and roles, automated
approvers, quorums of people and escalation, and the audit records of every decision.

Never runs tools and never resumes runs itself: it tells the brain.

The brain's side of the contract (subjects in `tether_common.subjects`):
* `approval_create` — park a request (`CreateApproval`, sealed by `action_digest`); an
  automated approver may answer it at once (the reply's status says so).
* `approval_decided` (JetStream) — one `ApprovalDecided` per decision, expiry included
  (`decision="expired"`), carrying the `action_digest` back; deduplicated by message id.
  A request that needs a quorum (`CreateApproval.quorum`, or the service's quorum rules:
  `tether_approvals.decisions.quorum`) is announced only once its quorum is met or anyone denies.
* `approval_consume` — spend a granted approval just before running the action; only
  outcome `consumed` lets it run (`already_consumed`, `approval_stale`, … otherwise).
* `approval_presence` — how many operators who may decide for an agent/owner are
  connected now (interactive runs deny at once when it is 0).
"""
