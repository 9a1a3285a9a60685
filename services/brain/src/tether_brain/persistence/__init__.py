"""Everything the brain keeps in PostgreSQL: the run and journal tables, commits and
leases as SQL, the queries that list runs and children, the agents/policy tables and the
audit trail writer.

Never decides anything: no gate, no model call, no scheduling; callers above decide and
this folder only reads and writes rows.
"""
