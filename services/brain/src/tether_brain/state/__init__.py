"""A run as it lives in memory: `RunState` with its counters and limits, its frozen
`RunOptions`, the control signals (stop, hand back) and the numbering of its typed events.

Owns no I/O but publishing already-committed events; never imports another brain folder.
"""
