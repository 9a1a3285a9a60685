"""Runs as a service: starting, reading, stopping and messaging runs, the task group that
advances them, lease maintenance (this replica's hold, renewal, takeover) and operators'
manual tool runs.

Never serves HTTP itself (the `api/` routes do) and never steps a run directly (the loop
does).
"""
