"""Everything the approvals service keeps in PostgreSQL, read and written within a
caller's scope: the tables, requests and the operator event log, the per-run audit
trails and their heads, operator presence and the pending gauge.

Never decides anything: no transition, no notice, no bus; callers above decide and this
folder only reads and writes rows.
"""
