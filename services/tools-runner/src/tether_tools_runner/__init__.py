"""Tether tools-runner: owns the tool catalogue and tool execution inside a sandbox, and
re-checks every hard constraint itself (defence in depth). Its durable facts (each keyed
non-idempotent call's outcome, which file revisions each run has read) are rows in
PostgreSQL and its workspace a folder every replica mounts, so any replica serves any call.

Never decides policy beyond hard constraints, never keeps run state in memory.
"""
